"""Who an HTTP request acts as, and whether it may.

With ``nats.auth`` (`herd up --auth`) every ``/v1`` request carries ``Authorization:
Bearer <token>`` (``?token=`` on ``/v1/events``: a browser's EventSource cannot set
headers); the token names an operator user, and a request acts as that user exactly as
its NATS credentials would (the API records the user, not what the body claims). A
read-only token may call the read routes only. Without auth the server listens on
loopback only (``check_bind``), as the embedded nats-server does, and refuses a
mutating request from a browser page of another origin (``same_origin``), so a page on
another site cannot cordon the fleet through the operator's browser.
"""

from __future__ import annotations

import logging
from typing import Protocol
from urllib.parse import urlsplit

from herdbook.hosts import is_loopback

log = logging.getLogger(__name__)


class Token(Protocol):
    @property
    def user(self) -> str: ...
    @property
    def read_only(self) -> bool: ...


class TokenBook(Protocol):
    """``natsd.http_tokens.HttpTokens``: a presented token's entry, or None."""

    def lookup(self, token: str) -> Token | None: ...


class Principal:
    """Who a request acts as: ``user`` None without auth (the API takes the body's
    ``actor``, as on the plain NATS route subject)."""

    __slots__ = ("read_only", "user")

    def __init__(self, user: str | None, read_only: bool) -> None:
        self.user = user
        self.read_only = read_only


ANONYMOUS = Principal(None, False)


class Refused(Exception):
    """A request that may not proceed: its HTTP status and error code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def bearer(authorization: str | None, query_token: str | None) -> str | None:
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        return None
    return query_token or None


def authenticate(book: TokenBook | None, authorization: str | None,
                 query_token: str | None = None) -> Principal:
    """The principal of a request; ``book`` None: auth is off, everyone is anonymous."""
    if book is None:
        return ANONYMOUS
    token = bearer(authorization, query_token)
    if token is None:
        raise Refused(401, "unauthenticated",
                      "this server requires a token: Authorization: Bearer <token> "
                      "(`herd creds operator --http`)")
    try:
        entry = book.lookup(token)
    except Exception as err:  # noqa: BLE001 - an unreadable token file refuses, logged
        log.error("HTTP tokens cannot be read: %s", err)
        entry = None
    if entry is None:
        raise Refused(401, "unauthenticated", "unknown or revoked token")
    return Principal(entry.user, entry.read_only)


def authorize(principal: Principal, mutating: bool) -> None:
    if mutating and principal.read_only:
        raise Refused(403, "forbidden", "this credential may only read")


def same_origin(origin: str | None, host: str | None, scheme: str) -> bool:
    """Whether a request's ``Origin`` (sent by browsers on cross-origin and on POST
    requests) is this server's own; no Origin (curl, the CLI, scripts) passes."""
    if origin is None:
        return True
    if origin == "null" or host is None:
        return False
    parts = urlsplit(origin)
    return parts.scheme == scheme and parts.netloc.lower() == host.lower()


def check_bind(host: str, auth: bool) -> str | None:
    """Why the HTTP server may not listen on ``host``, or None."""
    if auth or is_loopback(host):
        return None
    return (f"http.host {host} is not a loopback address: without --auth anyone who reaches "
            "it could act as any operator; use --auth (tokens from `herd creds operator "
            "--http`) or 127.0.0.1")
