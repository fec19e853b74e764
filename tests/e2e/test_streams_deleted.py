"""Streams and buckets deleted from outside a running `herd up` (issue 26, item 6), with
the nats-py JetStream management API, as someone holding the server's rights would:
HERD_EVENTS comes back and every node stays commandable, the next `herd up` starts (no
60 s hang, no bare "Error:"); the health and heartbeat streams come back and a fatal XID
is acted on; the leader lease and the settings buckets come back and the plane leads
again without a restart."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.errors import NotFoundError

from herdbook.control.leader import BUCKET as LEASES_BUCKET
from herdbook.events.liveness_settings import LIVENESS_KEY, SETTINGS_BUCKET, SETTINGS_STREAM
from herdbook.events.positions import POSITIONS_STREAM
from herdbook.events.subjects import EVENTS_STREAM, HEALTH_STREAM, HEARTBEATS_STREAM
from tests.conftest import herd, wait_until
from tests.e2e.conftest import Fleet
from tests.e2e.test_replicas import Replicas

pytestmark = pytest.mark.e2e

CONFIG = """
lifecycle:
  heartbeat_timeout: 2s
  grace_period: {standard: 30s}
approval: {auto_approve: true}
scheduler: {unblock_delay: 100ms}
"""

JOB = """\
id: after-loss
count: 1
command: ["sleep", "300"]
resources: {cpu: 0.01, memory_mb: 1, gpus: 1}
"""


def js_call(url: str, call: Any) -> Any:
    """``call(js)`` on a connection of its own (the test's process is not async)."""
    async def run() -> Any:
        nc = await nats.connect(url)
        try:
            return await call(nc.jetstream())
        finally:
            await nc.close()
    return asyncio.run(run())


def delete_stream(url: str, name: str) -> None:
    async def delete(js: Any) -> None:
        await js.delete_stream(name)
    js_call(url, delete)


def stream_there(url: str, name: str) -> bool:
    async def info(js: Any) -> bool:
        try:
            await js.stream_info(name)
        except NotFoundError:
            return False
        return True
    return bool(js_call(url, info))


def allocs(fleet: Fleet) -> list[dict[str, Any]]:
    out = herd("alloc", "list", "-o", "json", server=fleet.url, check=True)
    return list(json.loads(out.stdout))


def test_herd_events_deleted_while_running_nodes_stay_commandable_and_up_starts_again(
        fleet: Fleet) -> None:
    up = fleet.up(CONFIG)
    for node in ("gpu-1", "gpu-2", "gpu-3"):
        fleet.agent(node, "--heartbeat-interval", "0.5")
    wait_until(lambda: all(fleet.state(n) == "READY" for n in ("gpu-1", "gpu-2", "gpu-3")),
               timeout=30, what="READY")

    # when: HERD_EVENTS is deleted from outside
    delete_stream(fleet.url, EVENTS_STREAM)
    wait_until(lambda: stream_there(fleet.url, EVENTS_STREAM), timeout=10,
               what="HERD_EVENTS recreated")

    # then: a node the lost events registered is commanded (not "kept changing") ...
    cordoned = herd("node", "cordon", "gpu-1", server=fleet.url)
    assert cordoned.returncode == 0, cordoned.stderr
    assert fleet.describe("gpu-1")["intent"] == "CORDONED"
    # ... and a fatal XID on the other is acted on
    injected = herd("agent", "inject", "--node", "gpu-2", "xid", "79", server=fleet.url)
    assert injected.returncode == 0, injected.stderr
    wait_until(lambda: fleet.state("gpu-2") == "DOWN", timeout=15, what="gpu-2 DOWN")
    # ... and a job is placed on the one left, whose agent runs it
    spec = fleet.tmp / "job.yaml"
    spec.write_text(JOB)
    ran = herd("job", "run", str(spec), server=fleet.url)
    assert ran.returncode == 0, ran.stderr
    wait_until(lambda: [a["node_id"] for a in allocs(fleet) if a["status"] == "running"]
               == ["gpu-3"], timeout=30, what="the job running on gpu-3")

    # when: herd up is restarted
    up.send_signal(signal.SIGTERM)
    assert up.wait(15) == 0
    started = time.monotonic()
    up = fleet.up(CONFIG)
    took = time.monotonic() - started
    # then: it starts at once (no 60 s catch-up wait), keeps the fleet and decides on it
    assert up.poll() is None and took < 20, took
    assert {"gpu-1", "gpu-2", "gpu-3"} <= set(fleet.nodes())
    uncordoned = herd("node", "uncordon", "gpu-1", server=fleet.url)
    assert uncordoned.returncode == 0, uncordoned.stderr
    wait_until(lambda: fleet.state("gpu-1") == "READY", timeout=15, what="gpu-1 READY")
    log = (fleet.tmp / "up.log").read_text()
    assert "Error:" not in log and "Traceback" not in log


def test_the_lease_bucket_deleted_while_running_a_job_submitted_afterwards_is_placed(
        fleet: Fleet, tmp_path: Path) -> None:
    fleet.up(CONFIG)
    fleet.agent("gpu-1", "--heartbeat-interval", "0.5")
    wait_until(lambda: fleet.state("gpu-1") == "READY", timeout=30, what="READY")

    # when: the leader lease's bucket is deleted from outside
    delete_stream(fleet.url, f"KV_{LEASES_BUCKET}")
    wait_until(lambda: stream_there(fleet.url, f"KV_{LEASES_BUCKET}"), timeout=10,
               what="the lease bucket recreated")

    # then: a job submitted afterwards is placed, with no restart
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB)
    ran = herd("job", "run", str(spec), server=fleet.url)
    assert ran.returncode == 0, ran.stderr

    def placed() -> bool:
        return any(a["node_id"] == "gpu-1" for a in allocs(fleet))

    wait_until(placed, timeout=30, what="the job placed on gpu-1")


def test_the_settings_and_positions_buckets_deleted_while_running_come_back(
        fleet: Fleet) -> None:
    fleet.up(CONFIG)
    wait_until(lambda: stream_there(fleet.url, SETTINGS_STREAM), timeout=10,
               what="the settings bucket")

    delete_stream(fleet.url, SETTINGS_STREAM)

    async def liveness(js: Any) -> dict[str, Any] | None:
        try:
            kv = await js.key_value(SETTINGS_BUCKET)
            entry = await kv.get(LIVENESS_KEY)
        except Exception:  # noqa: BLE001 - not back yet
            return None
        value: dict[str, Any] = json.loads(entry.value)
        return value

    settings = wait_until(lambda: js_call(fleet.url, liveness), timeout=10,
                          what="the liveness settings written again")
    assert settings["heartbeat_timeout"]["standard"] == 2.0

    # the notifier's positions bucket too (made by the guard, not only at its next commit)
    wait_until(lambda: stream_there(fleet.url, POSITIONS_STREAM), timeout=10,
               what="the positions bucket")
    delete_stream(fleet.url, POSITIONS_STREAM)
    wait_until(lambda: stream_there(fleet.url, POSITIONS_STREAM), timeout=10,
               what="the positions bucket recreated")


def test_the_health_and_heartbeat_streams_deleted_a_fatal_xid_is_still_acted_on(
        fleet: Fleet) -> None:
    """The classifier decides only on a report after the last one it decided on: a
    health stream created again from sequence 1 had every new report ignored."""
    fleet.up(CONFIG)
    fleet.agent("gpu-1", "--heartbeat-interval", "0.5")
    wait_until(lambda: fleet.state("gpu-1") == "READY", timeout=30, what="READY")

    for stream in (HEALTH_STREAM, HEARTBEATS_STREAM):
        delete_stream(fleet.url, stream)
    wait_until(lambda: all(stream_there(fleet.url, s) for s in (HEALTH_STREAM,
                                                                 HEARTBEATS_STREAM)),
               timeout=10, what="both streams recreated")

    # at once: the first reports of the new stream are the ones a reused sequence hid
    injected = herd("agent", "inject", "--node", "gpu-1", "xid", "79", server=fleet.url)
    assert injected.returncode == 0, injected.stderr
    wait_until(lambda: fleet.state("gpu-1") == "DOWN", timeout=15, what="gpu-1 DOWN")


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    """Two `herd up --nats-url` on a nats-server of their own (``test_replicas``)."""
    with Replicas.running(tmp_path) as fleet:
        yield fleet


def test_two_replicas_both_rebase_and_every_command_lands_whichever_answers(
        replicas: Replicas) -> None:
    """The replica whose guard did not create HERD_EVENTS again hears of it by the
    stream's creation time and rebases its own view: commands spread by the API's queue
    group over both replicas all land (one left stale answered "kept changing")."""
    for name in ("cp-a", "cp-b"):
        replicas.plane(name)
    wait_until(lambda: herd("node", "list", server=replicas.url).returncode == 0, timeout=30)
    replicas.agent("gpu-1", "--heartbeat-interval", "0.5")
    wait_until(lambda: replicas.state("gpu-1") == "READY", timeout=30, what="READY")

    delete_stream(replicas.url, EVENTS_STREAM)
    wait_until(lambda: all("versions from the lost history set to 0"
                           in (replicas.tmp / f"{name}.log").read_text()
                           for name in ("cp-a", "cp-b")), timeout=15,
               what="both replicas rebased")
    for _ in range(4):   # the queue group spreads them over both replicas
        for command in ("cordon", "uncordon"):
            done = herd("node", command, "gpu-1", server=replicas.url)
            assert done.returncode == 0, done.stderr
