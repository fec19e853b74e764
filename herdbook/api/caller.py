"""Who a request acts as: the user its subject names, else what it claims."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol

CALLER: ContextVar[str | None] = ContextVar("herd_api_caller", default=None)
"""Set by the server around each request from ``herd.api.v1.<route>.<user>``."""


class _Claims(Protocol):
    @property
    def actor(self) -> str: ...


def caller(req: _Claims) -> str:
    """Who the event is recorded as: the user the request's subject names
    (``herd.api.v1.<route>.<user>``, which only that user's credentials may publish on),
    else, on the plain route subject (no credentials, or the control plane's own), what
    the request claims."""
    return CALLER.get() or req.actor
