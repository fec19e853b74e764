"""Talking to the control plane over NATS, with the CLI's exit codes:
0 ok, 1 refused, 2 usage, 3 control plane unreachable, 4 NATS storage full (the event
could not be stored; retry once space is freed)."""

from __future__ import annotations

import asyncio
import getpass
import re
import socket
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, overload

import msgspec

from herdbook.cli.nats_import import import_nats as import_nats
from herdbook.cli.output import LazyConsole
from herdbook.events.subjects import API_PREFIX, InvalidIdError, validate_id

if TYPE_CHECKING:
    import typer

    from herdbook.credentials import NatsAuth

err_console = LazyConsole(stderr=True, highlight=False, soft_wrap=True)

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_STORAGE_FULL = 4
DEFAULT_SERVER = "nats://127.0.0.1:4222"

T = TypeVar("T")
R = TypeVar("R")

class Server(str):
    """A NATS URL and the credentials to reach it with (the global --creds/--user/
    --password/--tls-* options, or a context's): made by the app callback into
    ``ctx.obj["server"]``, read by ``connect``. A ``str``, so every command that hands
    its server on as one keeps working; ``str()`` of it is itself, so the credentials
    survive the ``str(ctx.obj["server"])`` that most commands write. msgspec encodes no
    ``str`` subclass: what is encoded takes ``url``."""

    auth: NatsAuth | None

    def __new__(cls, url: str, auth: NatsAuth | None = None) -> Server:
        server = super().__new__(cls, url)
        server.auth = auth
        return server

    def __str__(self) -> str:
        return self

    @property
    def url(self) -> str:
        return str.__str__(self)


class Session:
    """What ``connect`` knows of one connection: the permission violations NATS reported
    on it, and the NATS user it authenticated as, if any: requests go to
    ``herd.api.v1.<route>.<user>`` and the control plane records that user as the actor."""

    def __init__(self, user: str | None) -> None:
        self.watch = PermissionWatch()
        self.user = user


def api_subject(route: str, user: str | None = None) -> str:
    return f"{API_PREFIX}.{route}.{user}" if user else f"{API_PREFIX}.{route}"


def fail(message: str, code: int) -> typer.Exit:
    import typer  # here: `herd node list` runs without typer (``herdbook.cli.entry``)

    from herdbook.cli.output import safe  # the message may quote what a client sent
    err_console.print(f"Error: {safe(message)}", markup=False)
    return typer.Exit(code=code)


def check_id(value: str, what: str = "node id") -> str:
    try:
        return validate_id(value, what)
    except InvalidIdError as err:
        raise fail(str(err), EXIT_USAGE) from None


_HOST = re.compile(r"[A-Za-z0-9._~%:_-]+\Z")
"""A host as ``urlparse`` gives it: a name, IPv4, or IPv6 without its brackets. A space
(``-s 'not a url'``) is not one: refused here, at once, not after a 3 s connect."""


def check_server(server: str, option: str = "--server") -> str:
    """A NATS URL, or several comma-separated, as nats-py takes them: refused (exit 2)
    when one has another scheme, no host, a host that is not one (a space, an unclosed
    IPv6 bracket) or a port outside 1-65535."""
    from urllib.parse import urlparse
    parts = [part.strip() for part in server.split(",") if part.strip()]
    if not parts:
        raise fail(f"{option} is empty: give a NATS URL, e.g. {DEFAULT_SERVER}", EXIT_USAGE)
    for part in parts:
        try:   # urlparse itself refuses an unclosed IPv6 bracket ("nats://[::1")
            url = urlparse(part if "://" in part else f"nats://{part}")
            port = url.port
        except ValueError:
            url, port = None, 0
        if (url is None or url.scheme not in ("nats", "tls", "ws", "wss") or not url.hostname
                or not _HOST.match(url.hostname) or port == 0):
            raise fail(f"{option} {part!r} is not a NATS URL: write e.g. {DEFAULT_SERVER}",
                       EXIT_USAGE)
    return server


def actor() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


_VIOLATION = re.compile(r'permissions violation for (publish|subscription) to "([^"]+)"',
                        re.IGNORECASE)


class PermissionWatch:
    """The permission violations NATS reported on one connection. nats-py hands them to
    the error callback only: without this watch a denied request waits for its timeout
    and looks like an outage."""

    def __init__(self) -> None:
        self.denied: list[str] = []
        self._changed = asyncio.Event()

    async def on_error(self, err: Exception) -> None:
        found = _VIOLATION.search(str(err))
        if found is not None:
            self.denied.append(found[2])
            self._changed.set()

    def blocking(self, subject: str | None) -> str | None:
        """The denied subject that stops a request to ``subject``: the subject itself,
        or a reply inbox this client may not subscribe to (``None``: any denied one)."""
        return next((d for d in self.denied if subject is None or d == subject
                     or d.startswith("_INBOX.")), None)

    async def guard(self, subject: str | None, pending: Awaitable[T]) -> T:
        """``pending``, unless NATS denies ``subject`` (``None``: anything) first: then
        permission denied."""
        task = asyncio.ensure_future(pending)
        try:
            while True:
                if (denied := self.blocking(subject)) is not None:
                    raise RequestFailed(f"permission denied: {denied}", EXIT_REFUSED)
                self._changed.clear()
                changed = asyncio.ensure_future(self._changed.wait())
                await asyncio.wait({task, changed}, return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
                if task.done():
                    return task.result()
        finally:
            task.cancel()


_sessions: weakref.WeakKeyDictionary[Any, Session] = weakref.WeakKeyDictionary()
"""Each connection's ``Session``, for as long as the connection lives: kept beside the
nats-py client, not on it, whose attributes are its own."""


def _watch(nc: Any) -> PermissionWatch | None:
    session = _sessions.get(nc)
    return None if session is None else session.watch


async def connect(server: str) -> Any:
    """A connection to ``server`` with its credentials (a ``Server``'s; a plain URL's
    own user:password, if any)."""
    import_nats(server)
    import nats

    from herdbook.credentials import CredentialsError, NatsAuth, redact, url_user
    from herdbook.nats_connection import server_list
    check_server(server)
    try:
        _, options = (getattr(server, "auth", None) or NatsAuth()).resolve(server)
    except CredentialsError as err:
        raise fail(str(err), EXIT_USAGE) from None
    session = Session(options.get("user") or url_user(server))
    watch = session.watch
    shown = redact(server)
    try:
        # nats-py keeps retrying a refused first connect; bound it ourselves.
        nc = await asyncio.wait_for(
            nats.connect(server_list(server), connect_timeout=2, allow_reconnect=False,
                         max_reconnect_attempts=0, name="herd-cli", error_cb=watch.on_error,
                         **options),
            timeout=3)
    except TimeoutError:
        raise fail(f"control plane unreachable at {shown}: no NATS answers",
                   EXIT_UNREACHABLE) from None
    except Exception as err:  # noqa: BLE001
        reason = " ".join((str(err) or type(err).__name__).split())
        if "authorization violation" in reason.lower():
            reason = ("NATS refused the credentials (authorization violation): pass --creds "
                      "FILE or --user/--password (`herd creds operator` issues them)")
        raise fail(f"control plane unreachable at {shown}: {reason}", EXIT_UNREACHABLE) from None
    _sessions[nc] = session
    return nc


async def _send(nc: Any, subject: str, data: bytes, timeout: float) -> Any:
    """``nc.request``, unless NATS denies the subject first (``PermissionWatch``)."""
    sent = nc.request(subject, data, timeout=timeout)
    watch = _watch(nc)
    return await (sent if watch is None else watch.guard(subject, sent))


async def guarded_request(nc: Any, subject: str, data: bytes, timeout: float) -> Any:
    """``nc.request`` to a subject outside the API (an agent's), failing at once with
    permission denied (exit 1) when NATS refuses it, as API requests do."""
    try:
        return await _send(nc, subject, data, timeout)
    except RequestFailed as err:
        if err.answered:
            raise
        raise fail(str(err), err.code) from None


async def unless_denied(nc: Any, pending: Awaitable[T], cased: Iterable[str] = ()) -> T:
    """``pending``, failing at once with permission denied (exit 1) on the first permission
    violation NATS reports on ``nc``: for a command whose every request is a read of its
    own (`herd events tail`: stream info, message gets, its consumer and its pulls).
    nats-py lowers the case of the server's error: a denied subject starting with one of
    ``cased`` is shown with that start as written there."""
    watch = _watch(nc)
    if watch is None:
        return await pending
    try:
        return await watch.guard(None, pending)
    except RequestFailed:
        denied = watch.blocking(None) or ""
        shown = next((start + denied[len(start):] for start in cased
                      if denied.startswith(start.lower())), denied)
        raise fail(f"permission denied: {shown}", EXIT_REFUSED) from None


class RequestFailed(Exception):
    """A request without a result: ``answered`` when the control plane replied with an
    error (a refusal of this one request), else no usable answer came (unreachable,
    timeout, permission denied), which no other request would get either."""

    def __init__(self, message: str, code: int, *, answered: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.answered = answered


@overload
async def request(nc: Any, route: str, payload: msgspec.Struct | dict[str, Any],
                  reply: type[R], *, timeout: float = 15.0) -> R: ...


@overload
async def request(nc: Any, route: str, payload: msgspec.Struct | dict[str, Any],
                  reply: None = None, *, timeout: float = 15.0) -> Any: ...


async def request(nc: Any, route: str, payload: msgspec.Struct | dict[str, Any],
                  reply: type[R] | None = None, *, timeout: float = 15.0) -> R | Any:
    """Send the route's request Struct and decode its reply Struct (``reply``; without
    one, the result as plain JSON). An error reply exits with its code."""
    try:
        return await attempt(nc, route, payload, reply, timeout=timeout)
    except RequestFailed as err:
        raise fail(err.message, err.code) from None


def bad_request(payload: msgspec.Struct | dict[str, Any]) -> str | None:
    """Why the control plane would refuse a request Struct as ``bad_request`` (a field
    over its ``Meta`` bounds: a reason too long, too many labels), or None. A Struct
    built in Python is not checked against its ``Meta``; decoding its JSON is, as the
    server does."""
    if not isinstance(payload, msgspec.Struct):
        return None
    try:
        msgspec.json.decode(msgspec.json.encode(payload), type=type(payload))
    except msgspec.ValidationError as err:
        import re
        what, _, where = str(err).partition(" - at `$.")
        field = re.match(r"\w+", where)
        return f"{field[0]}: {what}" if field else str(err)
    return None


def check_request(payload: msgspec.Struct | dict[str, Any]) -> None:
    """Exit 2 with one line if the control plane would refuse ``payload`` as malformed."""
    why = bad_request(payload)
    if why is not None:
        raise fail(why, EXIT_USAGE)


async def attempt(nc: Any, route: str, payload: msgspec.Struct | dict[str, Any],
                  reply: type[R] | None = None, *, timeout: float = 15.0) -> R | Any:
    """``request`` raising ``RequestFailed`` instead of exiting, for a command over many
    objects that reports each one's refusal and goes on. A request that breaks its
    Struct's bounds is refused here, before it is sent (exit 2)."""
    import nats.errors

    from herdbook.api.envelope import Envelope
    if (why := bad_request(payload)) is not None:
        raise RequestFailed(why, EXIT_USAGE)
    session = _sessions.get(nc)
    subject = api_subject(route, None if session is None else session.user)
    try:
        msg = await _send(nc, subject, msgspec.json.encode(payload), timeout)
    except nats.errors.NoRespondersError:
        raise RequestFailed("no control plane answers (is `herd up` running?)",
                            EXIT_UNREACHABLE) from None
    except nats.errors.TimeoutError:
        raise RequestFailed(f"the control plane did not answer {route} within {timeout:g}s",
                            EXIT_UNREACHABLE) from None
    try:
        body = msgspec.json.decode(msg.data, type=Envelope)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise RequestFailed(f"the control plane's reply to {route} does not decode: {err}",
                            EXIT_REFUSED) from None
    if not body.ok:
        code = {"bad_request": EXIT_USAGE,
                "storage_full": EXIT_STORAGE_FULL}.get(body.code, EXIT_REFUSED)
        raise RequestFailed(body.error or "refused", code, answered=True)
    if reply is msgspec.Raw:        # the result's bytes as they came, not scanned again
        return body.result
    try:
        return msgspec.json.decode(body.result, type=reply or Any)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise RequestFailed(f"the control plane's reply to {route} does not decode: {err}",
                            EXIT_REFUSED) from None


def run(server: str, fn: Callable[[Any], Awaitable[T]]) -> T:
    """``fn`` on a connection to ``server``. Its result is handed out beside the main
    task, not as the task's result: ``asyncio.run`` on Python 3.11 formats the task's
    repr (its result included, megabytes for `herd node list -o json`) as it restores
    the SIGINT handler."""
    result: list[T] = []

    async def main() -> None:
        nc = await connect(server)
        try:
            result.append(await fn(nc))
        finally:
            await nc.close()
    asyncio.run(main())
    return result[0]


@overload
def call(server: str, route: str, payload: msgspec.Struct | dict[str, Any],
         reply: type[R]) -> R: ...


@overload
def call(server: str, route: str, payload: msgspec.Struct | dict[str, Any],
         reply: None = None) -> Any: ...


def call(server: str, route: str, payload: msgspec.Struct | dict[str, Any],
         reply: type[R] | None = None) -> R | Any:
    check_request(payload)     # before connecting: a usage error needs no control plane
    return run(server, lambda nc: request(nc, route, payload, reply))


def plain(reply: Any) -> Any:
    """A reply Struct (or a list of them) as the JSON objects the renderers take: the
    same keys in the same order as the wire."""
    return msgspec.to_builtins(reply)
