"""BacklogReader against a real nats-server: every message up to the end once, in order,
while the same connection carries other traffic, and across a server restart; each test
with the compiled cut (``_frames``, where it was built) and with the Python one."""

from __future__ import annotations

import asyncio

import nats
import pytest

from herdbook.control.nats_parts import ensure_streams
from herdbook.events import narrow_parser
from herdbook.events.backlog_reader import BacklogReader, Frames
from herdbook.events.codec import encode
from herdbook.events.node import NodeRegistered
from herdbook.events.store import subject_of
from herdbook.events.subjects import EVENTS_STREAM
from tests.conftest import compiled_cut, settle


@pytest.fixture(autouse=True, params=["compiled cut", "python cut"])
def cut(request, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    if request.param == "python cut":
        monkeypatch.setattr(narrow_parser, "_c_cut", None)
    else:
        compiled_cut()   # skipped where it cannot be built here, failed where it did not build


async def fill(nc, count: int) -> int:  # type: ignore[no-untyped-def]
    for i in range(count):
        event = NodeRegistered(node_id=f"n{i % 300}")
        await nc.publish(subject_of(event), encode(event), headers={"Nats-Msg-Id": event.event_id})
    await nc.flush()
    return await settle(nc)


async def test_every_message_once_in_order_beside_other_traffic(nc) -> None:  # type: ignore[no-untyped-def]
    last = await fill(nc, 20_000)
    probes: list[bytes] = []

    async def on_probe(msg) -> None:  # type: ignore[no-untyped-def]
        probes.append(msg.data)

    await nc.subscribe("probe", cb=on_probe)
    seen: list[int] = []

    def on_msg(subject: str, data: bytes, seq: int) -> None:
        assert subject.startswith("herd.node.") and data
        seen.append(seq)
        if seq % 1000 == 0:
            return nc.publish("probe", str(seq).encode())  # awaited by the reader

    assert await BacklogReader(nc, EVENTS_STREAM, "herd.>", 101, last, on_msg, batch=500).run() == last
    assert seen == list(range(101, last + 1))
    await nc.flush()
    await asyncio.sleep(0.2)
    assert len(probes) == len([s for s in seen if s % 1000 == 0])
    info = await nc.jetstream().stream_info(EVENTS_STREAM)
    assert info.state.consumer_count == 0     # its consumer is deleted


async def test_the_reader_resumes_after_a_server_restart(nats_server) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(nats_server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        await ensure_streams(nc, 1, 3600.0)
        last = await fill(nc, 10_000)
        seen: list[int] = []
        restarted = False

        async def restart() -> None:
            nats_server.stop()
            await asyncio.sleep(0.5)
            nats_server.start()

        def on_msg(subject: str, data: bytes, seq: int) -> None:
            nonlocal restarted
            seen.append(seq)
            if seq == 3000 and not restarted:
                restarted = True
                asyncio.get_running_loop().create_task(restart())

        reader = BacklogReader(nc, EVENTS_STREAM, "herd.>", 1, last, on_msg, batch=200,
                               expires=1.0)
        assert await asyncio.wait_for(reader.run(), 60) == last
        assert restarted
        assert seen == list(range(1, last + 1))
    finally:
        await nc.close()


async def test_an_error_of_the_callback_stops_the_reader_and_is_raised(nc) -> None:  # type: ignore[no-untyped-def]
    last = await fill(nc, 3000)

    def on_msg(subject: str, data: bytes, seq: int) -> None:
        if seq == 1234:
            raise RuntimeError("fold failed")

    reader = BacklogReader(nc, EVENTS_STREAM, "herd.>", 1, last, on_msg, batch=100)
    try:
        await reader.run()
    except RuntimeError as err:
        assert str(err) == "fold failed"
    else:
        raise AssertionError("the error was swallowed")
    assert reader.last_seq == 1234
    assert await nc.request("$JS.API.INFO", b"", timeout=2)   # the connection still works


async def test_runs_stop_at_the_end_and_a_batch_consumer_gets_each_message_once(nc) -> None:  # type: ignore[no-untyped-def]
    last = await fill(nc, 3000)
    runs: list[list[int]] = []

    def on_batch(frames: Frames) -> None:
        assert all(subject.startswith(b"herd.node.") and data for subject, _, data in frames)
        runs.append([seq for _, seq, _ in frames])

    # pulls of 2,000 go past the end asked for (1,234): the run delivering it is cut there
    reader = BacklogReader(nc, EVENTS_STREAM, "herd.>", 7, 1234, lambda *_: None, batch=1000,
                           on_batch=on_batch)
    assert await reader.run() == 1234 < last
    assert [seq for run in runs for seq in run] == list(range(7, 1235))
    assert len(runs) < 1228 / 10    # runs, not one message at a time
