"""Every use of nats-py's private parts, in one place, checked before it is used.

herdbook reads a backlog and a live feed through a narrow parser installed on the
client (``backlog_reader``: a class swap of ``Client._ps``, other frames handed to
``Client._process_msg``, routes keyed by ``Subscription._id``) and writes a plan's atomic
batch as one command (``Client._send_command``). None of these is nats-py's API: a
release may rename or change them. pyproject.toml pins the range they were tested on (nats-py
2.16); outside it, or where a check fails, herdbook runs on the public client API:

- the backlog reader and the live feed take their deliveries as ``Msg`` through a
  subscription callback (nats-py parses each frame: slower, the same messages);
- an atomic batch is ``publish`` per message and a ``request`` to commit
  (``events.batch.publish_batch``: the same wire, one call per message).

The check (``problems``, names and signatures, on first use in a process) and the
start-up self-check (``self_check``, a round trip on the live connection: one frame
routed by sid, one handed to nats-py, both sent with ``_send_command``) decide once per
process; a failure is one WARNING naming what was found and the public path is taken
from then on. ``HERD_NATS_PRIVATE=off`` takes the public path on purpose (a test runs
the projector both ways; an operator may, if a check passes and a new nats-py misbehaves
all the same). Nothing private has no public fallback: the store and the feeds are
handed the ``NATS`` client itself, never reach it through a ``JetStreamContext``'s
``_nc``.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import logging
import os
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

log = logging.getLogger(__name__)

ENV = "HERD_NATS_PRIVATE"
"""``off`` (or ``0``, ``no``, ``false``): the public client API only."""
TESTED = "2.16"
"""The nats-py minor version the private parts were tested on (pyproject.toml pins it)."""

try:   # the parser module is not nats-py's API either: a release may move it
    from nats.protocol.parser import AWAITING_CONTROL_LINE as AWAITING_CONTROL_LINE
    from nats.protocol.parser import Parser
except ImportError:   # pragma: no cover - depends on the installed nats-py
    Parser = None   # type: ignore[assignment,misc]
    AWAITING_CONTROL_LINE = 1

ParserBase: type[Any] = Parser if Parser is not None else object
"""What the narrow parser (``narrow_parser._NarrowParser``) extends: nats-py's parser."""

_verdict: bool | None = None
"""Whether this process uses the private parts: decided once."""
_why = ""


def nats_py_version() -> str:
    try:
        return importlib.metadata.version("nats-py")
    except importlib.metadata.PackageNotFoundError:   # pragma: no cover - a source checkout
        return "unknown"


def _params(func: Any) -> list[str]:
    try:
        return [p for p in inspect.signature(func).parameters if p != "self"]
    except (TypeError, ValueError):
        return []


def problems(client: type[Any] = NATS, parser: type[Any] | None = Parser,
             subscription: type[Any] = Subscription) -> list[str]:
    """What does not look as the narrow parser and the batch writer expect (empty if
    all does); pure, on the classes given (the installed nats-py's by default)."""
    found: list[str] = []
    if parser is None:
        return ["nats.protocol.parser.Parser is gone"]
    if not inspect.iscoroutinefunction(getattr(parser, "parse", None)):
        found.append("Parser.parse is not a coroutine function")
    if not callable(getattr(parser, "reset", None)):
        found.append("Parser.reset is gone")
    if _params(parser.__init__)[:1] != ["nc"]:
        found.append(f"Parser({', '.join(_params(parser.__init__))}) does not take the client")
    process = getattr(client, "_process_msg", None)
    if not inspect.iscoroutinefunction(process) or _params(process) != [
            "sid", "subject", "reply", "data", "headers"]:
        found.append(f"Client._process_msg({', '.join(_params(process))}) is not "
                     "(sid, subject, reply, data, headers)")
    send = getattr(client, "_send_command", None)
    if not inspect.iscoroutinefunction(send) or _params(send)[:1] != ["cmd"]:
        found.append(f"Client._send_command({', '.join(_params(send))}) is not (cmd, ...)")
    if "id" not in _params(subscription.__init__):
        found.append("Subscription(...) has no id")
    return found


def _decide(ok: bool, why: str = "") -> bool:
    global _verdict, _why
    if _verdict is not False and not ok:
        log.warning("nats-py %s: its private parts are not as herdbook %s expects (%s): "
                    "reading and batching through the public client API (slower, the same "
                    "results); nats-py %s.x is the tested range", nats_py_version(),
                    TESTED, why, TESTED)
    _verdict, _why = ok, why
    return ok


def _forced_off() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("off", "0", "no", "false")


def enabled() -> bool:
    """Whether this process reads and batches through the private parts (checked on the
    first call: ``problems``, and ``HERD_NATS_PRIVATE``)."""
    if _verdict is None:
        if _forced_off():
            log.info("%s=off: reading and batching through nats-py's public client API", ENV)
            _set(False, f"{ENV}=off")
        else:
            found = problems()
            _decide(not found, "; ".join(found))
    return bool(_verdict)


def why() -> str:
    """Why the public path is taken ('' where it is not)."""
    enabled()
    return _why


def _set(ok: bool | None, why: str) -> None:
    global _verdict, _why
    _verdict, _why = ok, why


def reset() -> None:
    """Forget the verdict (tests that run both ways; the next ``enabled`` decides again)."""
    _set(None, "")


def parser_of(nc: Any) -> Any:
    """The client's protocol parser (``Client._ps``)."""
    return nc._ps


def install_parser(nc: Any, cls: type[Any]) -> Any:
    """Swap the client's parser to ``cls`` (a ``Parser`` subclass adding no slots) once,
    keeping its state (a half-read frame); return it."""
    parser = nc._ps
    if not isinstance(parser, cls):
        parser.__class__ = cls
    return parser


def process_msg(nc: Any) -> Callable[..., Any]:
    """Where nats-py's parser sends a message frame: ``(sid, subject, reply, data,
    headers)`` as bytes, awaited."""
    return nc._process_msg   # type: ignore[no-any-return]


async def send_command(nc: NATS, data: bytes) -> None:
    """Queue ``data`` (whole protocol frames) on the client's write buffer as ``publish``
    does; the next flush or request sends it."""
    await nc._send_command(data)


def sid_of(sub: Subscription) -> int:
    """A subscription's sid (the number in its MSG frames)."""
    return sub._id


def server_version(nc: NATS) -> str:
    """The connected server's version, through the public API."""
    version = nc.connected_server_version
    try:
        text = f"{version.major}.{version.minor}.{version.patch}"
    except (ValueError, TypeError):
        return "unknown"
    return text + (f"-{version.prerelease}" if version.prerelease else "")


def _hpub(subject: str, header: str, data: bytes) -> bytes:
    head = f"NATS/1.0\r\n{header}\r\n\r\n".encode()
    return (f"HPUB {subject} {len(head)} {len(head) + len(data)}\r\n".encode() + head + data
            + b"\r\n")


async def self_check(nc: NATS, sid_routes: Callable[[NATS], dict[int, Any]],
                     timeout: float = 5.0) -> bool:
    """On a live connection, before the projector or a writer uses it: a frame with
    headers to an inbox routed by sid (``sid_routes``: the narrow parser's table,
    ``narrow_parser.sid_routes``) reaches its route as raw bytes, a frame to a plain
    subscription reaches nats-py's ``Msg``, both written with ``_send_command``. Decides
    ``enabled`` for the process; a failure is one WARNING and the public path."""
    if not enabled():
        return False

    routed: asyncio.Future[tuple[bytes, bytes, bytes, bytes | None]] = (
        asyncio.get_running_loop().create_future())
    plain: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()

    def route(subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        if not routed.done():
            routed.set_result((subject, reply, data, headers))

    async def on_plain(msg: Msg) -> None:
        if not plain.done():
            plain.set_result(msg)

    routed_sub = plain_sub = None
    routes: dict[int, Any] | None = None
    try:
        routed_sub = await nc.subscribe(nc.new_inbox())
        plain_sub = await nc.subscribe(nc.new_inbox(), cb=on_plain)
        routes = sid_routes(nc)
        routes[sid_of(routed_sub)] = route
        await send_command(nc, _hpub(routed_sub.subject, "Herd-Check: 1", b"routed")
                           + _hpub(plain_sub.subject, "Herd-Check: 2", b"plain"))
        await nc.flush(int(timeout))
        got, msg = await asyncio.wait_for(asyncio.gather(routed, plain), timeout)
        wrong = []
        if got[:3] != (routed_sub.subject.encode(), b"", b"routed") or b"Herd-Check: 1" not in (
                got[3] or b""):
            wrong.append(f"a routed frame arrived as {got!r}")
        if msg.data != b"plain" or (msg.headers or {}).get("Herd-Check") != "2":
            wrong.append(f"a plain frame arrived as {msg.data!r} {msg.headers!r}")
        ok, why = not wrong, "; ".join(wrong)
    except Exception as err:  # noqa: BLE001 - any failure of the check is its verdict
        ok, why = False, f"the start-up check failed: {type(err).__name__}: {err}"
    finally:
        if routes is not None and routed_sub is not None:
            routes.pop(sid_of(routed_sub), None)
        for sub in (routed_sub, plain_sub):
            if sub is not None:
                try:
                    await sub.unsubscribe()
                except Exception:  # noqa: BLE001 - the connection may be gone
                    pass
    if not ok and Parser is not None and isinstance(getattr(nc, "_ps", None), Parser):
        nc._ps.__class__ = Parser   # nats-py's own parser back, as it came
    return _decide(ok, why)
