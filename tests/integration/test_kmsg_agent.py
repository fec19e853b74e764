"""XIDs from the kernel log end to end (issue 19 item 1): given a control plane and an
agent with fake GPUs reading its kernel log from a FIFO (`--kmsg-source file:PATH`), when
the driver's XID lines are written into the FIFO, then the agent reports them at once
(without waiting for the health interval and without NVML events), naming the GPU by
its PCI bus id, and the classifier decides on them: XID 79 makes the node UNHEALTHY and
DOWN."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from herdbook.agent import fake_nvml
from herdbook.agent.kmsg import normalise_bus_id
from herdbook.agent.main import Agent, AgentOptions
from herdbook.control.plane import ControlPlane
from herdbook.events.codec import decode_health_report
from herdbook.events.states import Health, Lifecycle
from herdbook.events.subjects import HEALTH_STREAM
from tests.integration.conftest import running_plane
from tests.integration.test_agent_executor import eventually

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def plane(nats_server, tmp_path: Path) -> AsyncIterator[ControlPlane]:  # type: ignore[no-untyped-def]
    async with running_plane(f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\n"
                             "node_id: cp\n") as control:
        yield control


async def _true(value: bool) -> bool:
    return value


async def test_xid_lines_written_to_the_fifo_classify_the_node(
        plane: ControlPlane, nats_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    projector = plane.projector
    assert projector is not None and plane.nc is not None
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    agent = Agent(AgentOptions(server=nats_server.url, node_id="k1",
                               state_dir=str(tmp_path / "k1"), heartbeat_interval=0.2,
                               health_interval=3600.0, fake_gpus=4,
                               kmsg_source=f"file:{fifo}", kmsg_poll_interval=0.05))
    task = asyncio.create_task(agent.run())
    try:
        await eventually(lambda: _true("k1" in projector.nodes
                                       and projector.nodes["k1"].lifecycle is Lifecycle.READY),
                         what="k1 READY")
        bus = normalise_bus_id(fake_nvml.fake_bus_id(2))
        # the writer opens the FIFO without blocking: the agent holds its read end
        writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(writer, (
                "usb 1-1: new high-speed USB device number 2 using xhci_hcd\n"
                f"[ 8812.123456] NVRM: Xid (PCI:{bus}): 79, pid='<unknown>', name=<unknown>, "
                "GPU has fallen off the bus.\n").encode())
        finally:
            os.close(writer)
        await eventually(lambda: _true(projector.nodes["k1"].health is Health.UNHEALTHY
                                       and projector.nodes["k1"].lifecycle is Lifecycle.DOWN),
                         timeout=20, what="k1 UNHEALTHY and DOWN")
        assert "XID 79 on GPU 2" in projector.nodes["k1"].health_reason
        last = await plane.nc.jetstream().get_last_msg(HEALTH_STREAM, "herd.health.k1")
        report = decode_health_report(last.data)
        assert [(e.kind, e.gpu, e.xid, e.source) for e in report.events] == [
            ("xid", 2, 79, "kmsg")]
        assert report.events[0].message == "GPU has fallen off the bus."
    finally:
        await agent.stop()
        await task


async def _stored_reports(plane: ControlPlane, node_id: str) -> int:
    assert plane.nc is not None
    info = await plane.nc.jetstream().stream_info(HEALTH_STREAM, subjects_filter=f"herd.health.{node_id}")
    return (info.state.subjects or {}).get(f"herd.health.{node_id}", 0)


async def test_the_fault_history_survives_a_control_plane_restart(
        nats_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """XID 31 twice from the kernel log, the control plane restarted, XID 31 once more:
    the third within 24 h on the same GPU makes the node UNHEALTHY (repeated-xid), so the
    restarted classifier counted the two before it from HERD_HEALTH."""
    config = (f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\n"
              "node_id: cp\n")
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    agent = Agent(AgentOptions(server=nats_server.url, node_id="k2",
                               state_dir=str(tmp_path / "k2"), heartbeat_interval=0.2,
                               health_interval=3600.0, fake_gpus=2,
                               kmsg_source=f"file:{fifo}", kmsg_poll_interval=0.05))
    line = (f"NVRM: Xid (PCI:{normalise_bus_id(fake_nvml.fake_bus_id(1))}): 31, pid=77, name=train, "
            "Ch 0000002e, intr 10000000. MMU Fault\n").encode()

    def write_line() -> None:
        writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(writer, line)
        finally:
            os.close(writer)

    task = asyncio.create_task(agent.run())
    try:
        async with running_plane(config) as plane:
            projector = plane.projector
            assert projector is not None
            await eventually(lambda: _true("k2" in projector.nodes and projector.nodes["k2"].lifecycle
                                           is Lifecycle.READY), what="k2 READY")
            for n in range(2):
                before = await _stored_reports(plane, "k2")
                write_line()
                await eventually(lambda b=before: _stored_reports_above(plane, b), what=f"XID {n}")
            await eventually(lambda: _true(projector.nodes["k2"].health is Health.DEGRADED),
                             what="k2 DEGRADED")
        async with running_plane(config) as plane:
            projector = plane.projector
            assert projector is not None
            await eventually(lambda: _true("k2" in projector.nodes), what="k2 in the view")
            assert projector.nodes["k2"].health is Health.DEGRADED
            write_line()
            await eventually(lambda: _true(projector.nodes["k2"].health is Health.UNHEALTHY),
                             timeout=20, what="k2 UNHEALTHY")
            assert projector.nodes["k2"].health_reason.startswith(
                "critical: repeated-xid: XID 31 on GPU 1"), projector.nodes["k2"].health_reason
    finally:
        await agent.stop()
        await task


async def _stored_reports_above(plane: ControlPlane, before: int) -> bool:
    return await _stored_reports(plane, "k2") > before
