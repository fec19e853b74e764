"""``fleet.repairs``: repair episodes, their percentiles and the fleet's availability,
from the live repair fold (``history/repairs_live.py``): no read of the log per request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from herdbook.api.history_routes import fitting
from herdbook.api.lookup import ApiError, decode
from herdbook.api.repair_messages import ListRepairs, RepairsReply
from herdbook.clock import Clock
from herdbook.history.repair_episodes import Episode
from herdbook.history.repair_queries import availability, episodes, summary
from herdbook.history.repairs_live import LiveRepairs
from herdbook.history.times import iso

DEFAULT_WINDOW = timedelta(days=7)
STATUS_METRICS = ("time_to_quarantine", "time_to_drain", "time_in_repair", "mttr")


def episode_json(episode: Episode) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(episode)
    out["durations"] = episode.durations()
    return out


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


class RepairRoutes:
    def __init__(self, live: LiveRepairs, clock: Clock) -> None:
        self.live = live
        self.clock = clock

    def routes(self) -> dict[str, Callable[[bytes], Awaitable[Any]]]:
        return {"fleet.repairs": self.repairs}

    def _ready(self) -> None:
        if not self.live.ready:
            raise ApiError("unavailable", self.live.failed or "repairs: still reading the "
                           "event log since this control plane started; try again")

    async def repairs(self, data: bytes) -> RepairsReply:
        req = decode(data, ListRepairs, empty=True)
        self._ready()
        now = self.clock.now()
        since = _utc(req.since) if req.since is not None else now - DEFAULT_WINDOW
        if since > now:
            # a well-formed time the clock refuses, not a bad request (the OpenAPI
            # document cannot say "not in the future"): refused, 409, exit 1
            raise ApiError("refused", f"since {iso(since)} is in the future")
        state = self.live.state
        found = episodes(state, since, pool=req.pool, kind=req.kind, node_id=req.node_id)
        items = [episode_json(e) for e in found]
        kept = fitting(items[::-1], max(1, req.limit))[::-1]
        return RepairsReply(since=iso(since), until=iso(now), items=kept,
                            omitted=len(items) - len(kept), summary=summary(found),
                            availability=availability(state, since, now),
                            as_of_seq=state.seq)

    def status(self) -> dict[str, Any]:
        """``herd status``'s repairs: the last 7 days' percentiles (p50, p90) of the four
        durations for the fleet, per pool (with its availability) and per fault kind, and
        the fleet's availability."""
        if not self.live.ready:
            return {"reading_log": True, **({"error": self.live.failed}
                                            if self.live.failed else {})}
        now = self.clock.now()
        since = now - DEFAULT_WINDOW
        state = self.live.state
        found = episodes(state, since)
        got = summary(found)
        avail = availability(state, since, now)

        def p(row: dict[str, Any]) -> dict[str, Any]:
            return {"p50_s": row["p50"], "p90_s": row["p90"], "count": row["count"]}

        def four(group: dict[str, Any]) -> dict[str, Any]:
            return {name: p(group[name]) for name in STATUS_METRICS}

        pools = {name: {**(four(got["pools"][name]) if name in got["pools"] else {}),
                        "availability": avail["pools"].get(name, {}).get("availability")}
                 for name in sorted({*got["pools"], *avail["pools"]})}
        return {
            "window": "7d", "open": got["open"], "back_in_service": got["episodes"],
            "availability": avail["availability"],
            "gpu_hours_in_service": avail["gpu_hours_in_service"],
            "gpu_hours_owned": avail["gpu_hours_owned"],
            **four(got["fleet"]),
            "by_pool": pools,
            "by_kind": {kind: four(row) for kind, row in got["kinds"].items()},
        }
