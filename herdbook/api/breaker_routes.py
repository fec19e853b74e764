"""``breaker.status`` and ``breaker.reset``: the fleet-wide circuit breaker
(``reactors/breaker.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from herdbook.api.caller import caller
from herdbook.api.lookup import decode
from herdbook.api.messages import ResetBreaker
from herdbook.reactors.breaker import Breaker

Handler = Callable[[bytes], Awaitable[Any]]


class BreakerRoutes:
    def __init__(self, breaker: Breaker) -> None:
        self.breaker = breaker

    def routes(self) -> dict[str, Handler]:
        return {"breaker.status": self.status, "breaker.reset": self.reset}

    async def status(self, data: bytes) -> dict[str, Any]:
        return self.breaker.status()

    async def reset(self, data: bytes) -> dict[str, Any]:
        req = decode(data, ResetBreaker)
        done = await self.breaker.reset(req.scope, req.reason, caller(req))
        return {"reset": req.scope or "every scope", "seq": done.seq,
                **self.breaker.status()}
