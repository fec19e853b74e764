"""nats-py's private parts (``events.nats_private``) against a real nats-server: the
start-up self-check passes on the installed nats-py; the projector gives the same view
through the private parts and through the public client API (``HERD_NATS_PRIVATE=off``,
or a check that fails: one WARNING); an atomic batch lands whole and a store's feed reads
it either way, also on a nats-py whose ``JetStreamContext`` has no ``_nc``."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js import JetStreamContext
from nats.protocol.parser import Parser

from herdbook.events import nats_private
from herdbook.events.alloc import AllocPlaced
from herdbook.events.codec import encode
from herdbook.events.narrow_parser import _NarrowParser, sid_routes
from herdbook.events.node import NodeCordoned, NodeDegraded, NodeRecovered, NodeRegistered
from herdbook.events.store import EventStore, subject_of
from herdbook.projector.projection import ProjectorRunner
from tests.conftest import settle


@pytest.fixture(autouse=True)
def fresh_verdict() -> Iterator[None]:
    nats_private.reset()
    yield
    nats_private.reset()


@pytest.fixture
def no_private_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """A nats-py whose ``JetStreamContext`` keeps its client under another name: ``_nc``
    read by anything but nats-py itself is an AttributeError (the client's own methods
    still find it)."""
    own = JetStreamContext.__getattribute__

    def getattribute(self: JetStreamContext, name: str) -> Any:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if name == "_nc" and caller != "nats" and not caller.startswith("nats."):
            raise AttributeError(f"this nats-py's JetStreamContext has no _nc ({caller})")
        return own(self, name)

    monkeypatch.setattr(JetStreamContext, "__getattribute__", getattribute)


async def fill(nc: Any) -> int:
    for i in range(3000):
        node = f"n{i % 51}"   # 51 and 4 coprime: every node gets every kind
        event = (NodeRegistered(node_id=node), NodeDegraded(node_id=node, heartbeat_age=31.0),
                 NodeRecovered(node_id=node), NodeCordoned(node_id=node, reason=f"r{i}"))[i % 4]
        await nc.publish(subject_of(event), encode(event))
    return await settle(nc)


def dump(db: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return sorted(conn.execute("SELECT * FROM nodes").fetchall())


async def projector(url: str, db: Path, last: int) -> tuple[Any, ProjectorRunner]:
    """A projector on a fresh connection, caught up with the backlog up to ``last``."""
    nc = await nats.connect(url)
    await nats_private.self_check(nc, sid_routes)
    runner = ProjectorRunner(nc, str(db), batch_size=200)
    await runner.start()
    await runner.wait_applied(last, timeout=60)
    return nc, runner


async def both_ways(nats_server: Any, nc: Any, tmp_path: Path, public: Any) -> tuple[
        list[tuple[object, ...]], list[tuple[object, ...]], type, type]:
    """The views of two projectors, one through the private parts and one through what
    ``public()`` sets up, after the same backlog and the same live events; each client's
    parser class."""
    last = await fill(nc)
    private_nc, private = await projector(nats_server.url, tmp_path / "private.db", last)
    assert nats_private.enabled()
    nats_private.reset()
    public()
    public_nc, other = await projector(nats_server.url, tmp_path / "public.db", last)
    for i in range(200):   # live, to both
        event = NodeCordoned(node_id=f"n{i % 50}", reason=f"live {i}")
        await nc.publish(subject_of(event), encode(event))
    last = await settle(nc)
    for runner, client in ((private, private_nc), (other, public_nc)):
        await runner.wait_applied(last, timeout=60)
        await runner.stop()
        await client.close()
    return (dump(tmp_path / "private.db"), dump(tmp_path / "public.db"),
            type(private_nc._ps), type(public_nc._ps))


def test_the_installed_nats_py_is_what_the_private_parts_expect() -> None:
    assert nats_private.problems() == []


def test_a_changed_nats_py_is_named() -> None:
    class Changed:   # a release that renamed what the parser hands a message to
        async def _handle_msg(self, sid: int, subject: bytes) -> None: ...

        async def _send_command(self, cmd: bytes, priority: bool = False) -> None: ...

    found = nats_private.problems(client=Changed)
    assert len(found) == 1 and "Client._process_msg()" in found[0]


async def test_the_projector_folds_the_same_view_both_ways(nats_server, nc, tmp_path,  # type: ignore[no-untyped-def]
                                                           monkeypatch, caplog) -> None:
    caplog.set_level(logging.INFO, logger="herdbook.events.nats_private")
    private, public, private_parser, public_parser = await both_ways(
        nats_server, nc, tmp_path, lambda: monkeypatch.setenv(nats_private.ENV, "off"))
    assert private_parser is _NarrowParser
    assert not nats_private.enabled() and public_parser is Parser   # nats-py's own, as it came
    assert public == private and len(public) == 51
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_failed_check_warns_once_and_the_projector_runs_on_the_public_api(  # type: ignore[no-untyped-def]
        nats_server, nc, tmp_path, monkeypatch, caplog, no_private_client) -> None:
    caplog.set_level(logging.WARNING)
    private, public, _, public_parser = await both_ways(
        nats_server, nc, tmp_path, lambda: monkeypatch.setattr(
            nats_private, "problems", lambda: ["Client._process_msg() changed"]))
    assert public_parser is Parser and public == private
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "Client._process_msg() changed" in warnings[0] and "public client API" in warnings[0]


@pytest.mark.parametrize("private", [True, False], ids=["private", "public"])
async def test_an_atomic_batch_lands_whole_either_way(  # type: ignore[no-untyped-def]
        nc, monkeypatch, private, no_private_client) -> None:
    """Both ways on a nats-py without ``JetStreamContext._nc``: the store writes the batch
    and feeds it back on the client it was handed."""
    if not private:
        monkeypatch.setenv(nats_private.ENV, "off")
    assert nats_private.enabled() is private
    store = EventStore(nc)
    events = [AllocPlaced(node_id="n1", alloc_id=f"a{i}", job_id="j", eval_id="e", index=i,
                          command=["true"]) for i in range(5)]
    seq = await store.append_batch(events, 0)
    assert [e.alloc_id for _, e in await store.load("alloc", "n1")] == [  # type: ignore[attr-defined]
        f"a{i}" for i in range(5)]
    assert [s for s, _ in await store.load("alloc", "n1")][-1] == seq
    fed: list[int] = []
    done = asyncio.Event()

    async def on_msg(msg: Any) -> None:
        fed.append(msg.metadata.sequence.stream)
        if len(fed) == 5:
            done.set()

    feed = await store.subscribe(1, on_msg, subject="herd.alloc.>")
    await asyncio.wait_for(done.wait(), 10)
    await feed.stop()
    assert fed[-1] == seq and fed == sorted(fed)


async def test_the_public_reader_and_feed_keep_their_guarantees(nats_server, nc, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The backlog reader's and the live feed's own tests, on the public path: every
    message once in order beside other traffic, an error raised, a server restart
    survived (the feed's restart test wants an empty stream: its public path differs
    from the private one only in the route it does not register)."""
    from tests.integration import test_backlog_reader, test_feed

    monkeypatch.setenv(nats_private.ENV, "off")
    await test_backlog_reader.test_every_message_once_in_order_beside_other_traffic(nc)
    await test_backlog_reader.test_an_error_of_the_callback_stops_the_reader_and_is_raised(nc)
    await test_feed.test_a_slow_callback_gets_every_message_once_in_order(nc)
    assert type(nc._ps) is Parser   # never swapped: nats-py parsed every frame
    await nc.close()
    await test_backlog_reader.test_the_reader_resumes_after_a_server_restart(nats_server)


async def test_a_self_check_whose_frame_is_not_routed_warns_and_restores_the_parser(  # type: ignore[no-untyped-def]
        nc, caplog) -> None:
    """A nats-py whose parser no longer hands frames to the routes (here: routes the
    parser never reads): the check times out, says so once, and nats-py's parser is
    back as it came."""
    caplog.set_level(logging.WARNING)

    def unread_routes(client: Any) -> dict[int, Any]:
        sid_routes(client)   # the narrow parser installed, as the real table does
        return {}

    assert not await nats_private.self_check(nc, unread_routes, timeout=1.0)
    assert not nats_private.enabled() and type(nc._ps) is Parser
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "start-up check failed" in warnings[0], warnings
    assert await nc.request("$JS.API.INFO", b"", timeout=2)   # the connection still works
