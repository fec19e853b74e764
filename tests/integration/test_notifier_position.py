"""The notifier's committed position against a real nats-server (issue 26 item 7): a
notifier stopped (its lease lost) and another started acts on exactly the node events it
had not acted on, for the exec and the Slurm notifier alike (one mechanism: the key
``herd_positions.notifier``, the log read after it). The webhook's case with two real
replicas is tests/e2e/test_notifier_takeover.py."""

from __future__ import annotations

import asyncio
import functools
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.events.node import (
    NodeApproved,
    NodeBootChecked,
    NodeCordoned,
    NodeInfo,
    NodeRegistered,
    NodeUncordoned,
)
from herdbook.events.positions import NOTIFIER_KEY, POSITIONS_STREAM, KvPosition
from herdbook.events.store import EventStore
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.notifier import Notifier
from herdbook.reactors.tracking import node_events
from tests.conftest import poll


class World:
    def __init__(self, nc: Any, tmp_path: Path, notifier_yaml: str) -> None:
        self.nc = nc
        self.tmp = tmp_path
        self.store = EventStore(nc)
        self.projector = ProjectorRunner(nc, str(tmp_path / "view.db"), batch_interval=0.01)
        self.config = parse_config(notifier_yaml).notifier
        self.calls = tmp_path / "calls"
        self.calls.touch()

    def position(self) -> KvPosition:
        return KvPosition(self.nc, NOTIFIER_KEY, holder="cp", clock=SYSTEM_CLOCK)

    def notifier(self) -> Notifier:
        """A leader's notifier, as bootstrap builds it for every term."""
        return Notifier(self.config, self.projector, clock=SYSTEM_CLOCK,
                        runner=DecideRunner(self.store, self.projector, SYSTEM_CLOCK),
                        position=self.position(),
                        events=functools.partial(node_events, self.nc))

    async def append(self, event: Any) -> int:
        seq = await self.store.append(event)
        await self.projector.wait_applied(seq)
        return seq

    def lines(self) -> list[str]:
        return [line for line in self.calls.read_text().splitlines()
                if line.startswith(("cordon", "uncordon", "update"))]


async def until(predicate: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    return await poll(predicate, timeout, what)


def exec_config(tmp_path: Path) -> str:
    calls = tmp_path / "calls"
    return ("notifier: {type: exec, retries: 0, exec: {"
            f"cordon: 'echo cordon $HERD_EVENT_ID $HERD_EVENT_SEQ {{reason}} >> {calls}', "
            f"uncordon: 'echo uncordon $HERD_EVENT_ID $HERD_EVENT_SEQ >> {calls}'}}}}")


def slurm_config(tmp_path: Path) -> str:
    """A stand-in scontrol: logs its arguments; shows the node drained by herdbook."""
    script, calls = tmp_path / "scontrol", tmp_path / "calls"
    script.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s|" "$a"; done >> {calls}\n'
                      f'echo >> {calls}\n'
                      'if [ "$1" = -o ]; then echo "NodeName=n1 State=IDLE+DRAIN '
                      'Reason=herdbook: x"; fi\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return f"notifier: {{type: slurm, retries: 0, slurm: {{scontrol: '{script}'}}}}"


@pytest.fixture(params=["exec", "slurm"])
async def world(request: Any, nc: Any, tmp_path: Path) -> AsyncIterator[World]:
    yaml = exec_config(tmp_path) if request.param == "exec" else slurm_config(tmp_path)
    w = World(nc, tmp_path, yaml)
    await w.projector.start()
    await w.append(NodeRegistered(node_id="n1", boot_id="b", info=NodeInfo()))
    await w.append(NodeApproved(node_id="n1"))
    await w.append(NodeBootChecked(node_id="n1", boot_id="b", passed=True))
    try:
        yield w
    finally:
        await w.projector.stop()


async def test_a_new_term_acts_once_on_what_the_last_one_had_not_acted_on(
        world: World) -> None:
    kind = world.config.type
    # given a first leader's notifier (no position stored: it starts at the log's end)
    first = world.notifier()
    await first.start()
    end = world.projector.folded_seq
    await until(lambda: world.position().read(), what="the first position")
    assert await world.position().read() == end
    cordon = NodeCordoned(node_id="n1", reason="one")
    one = await world.append(cordon)
    await until(lambda: len(world.lines()) == 1, what="the first cordon")
    await until(lambda: _at_least(world, one), what="the position after it")
    await first.stop()

    # when the node is uncordoned and cordoned again while no notifier runs
    uncordon = NodeUncordoned(node_id="n1")
    cordon2 = NodeCordoned(node_id="n1", reason="two")
    await world.append(uncordon)
    two = await world.append(cordon2)
    await asyncio.sleep(0.3)
    assert len(world.lines()) == 1
    assert await world.position().read() == one

    # then the next term's notifier sends those two, in order, and not the first again
    second = world.notifier()
    await second.start()
    try:
        await until(lambda: len(world.lines()) >= 3, what="the two missed ones")
        await until(lambda: _at_least(world, two), what="the position after them")
        await asyncio.sleep(0.5)
    finally:
        await second.stop()
    lines = world.lines()
    if kind == "exec":
        assert lines == [f"cordon {cordon.event_id} {one} one",
                         f"uncordon {uncordon.event_id} {two - 1}",
                         f"cordon {cordon2.event_id} {two} two"]
    else:
        assert lines == ["update|NodeName=n1|State=DRAIN|Reason=herdbook: one|",
                         "update|NodeName=n1|State=RESUME|",
                         "update|NodeName=n1|State=DRAIN|Reason=herdbook: two|"]

    # and a third term has nothing left to send
    third = world.notifier()
    await third.start()
    try:
        await asyncio.sleep(1.0)
    finally:
        await third.stop()
    assert world.lines() == lines
    assert await world.position().read() >= two


async def _is(world: World, seq: int) -> bool:
    return await world.position().read() == seq


async def _at_least(world: World, seq: int) -> bool:
    return (await world.position().read() or 0) >= seq


async def test_a_position_past_the_log_end_resumes_at_the_end(nc: Any, tmp_path: Path) -> None:
    """HERD_EVENTS created again (item 6) hands out sequences from where it was: a stored
    position past its end must not make the notifier skip what comes next."""
    w = World(nc, tmp_path, exec_config(tmp_path))
    await w.projector.start()
    try:
        await w.append(NodeRegistered(node_id="n1", boot_id="b", info=NodeInfo()))
        await w.position().commit(1_000_000)
        notifier = w.notifier()
        await notifier.start()
        try:
            await until(lambda: notifier.progress is not None and not notifier._resuming,
                        what="the notifier resumed")
            # the position goes back to the log's end (a reset, not a commit: those
            # never move back), and what is folded next is notified
            await until(lambda: _is(w, w.projector.folded_seq), what="the position reset")
            seq = await w.append(NodeCordoned(node_id="n1", reason="after"))
            await until(lambda: len(w.lines()) == 1, what="the cordon")
            await until(lambda: _is(w, seq), what="the position after it")
        finally:
            await notifier.stop()
        assert w.lines()[0].endswith(" after")
    finally:
        await w.projector.stop()


async def test_a_commit_never_moves_the_position_back(nc: Any) -> None:
    a = KvPosition(nc, NOTIFIER_KEY, holder="cp-a", clock=SYSTEM_CLOCK)
    b = KvPosition(nc, NOTIFIER_KEY, holder="cp-b", clock=SYSTEM_CLOCK)
    assert await a.read() is None
    assert await a.commit(10) == 10
    assert await b.commit(5) == 10       # a late commit of a deposed leader
    assert await b.read() == 10
    assert await b.commit(12) == 12
    assert await a.read() == 12


async def test_a_bucket_deleted_from_outside_is_created_again(nc: Any) -> None:
    position = KvPosition(nc, NOTIFIER_KEY, holder="cp", clock=SYSTEM_CLOCK)
    await position.commit(7)
    await nc.jetstream().delete_stream(POSITIONS_STREAM)
    assert await position.read() is None     # the bucket created again, the key lost

    async def committed() -> bool:
        # the server may answer "no responders" for a moment after the stream came back
        # (the notifier's commit loop tries again, as here)
        try:
            return await position.commit(9) == 9
        except Exception:  # noqa: BLE001
            return False
    await until(committed, what="a commit into the bucket created again")
    assert await position.read() == 9
