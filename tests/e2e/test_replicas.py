"""Two control planes against one NATS (DESIGN §9): a fleet in which nodes die; every
transition is appended exactly once, one replica leads the scheduler, and when a
replica is SIGKILLed the API keeps answering and the other takes over."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import pytest

from herdbook.events.codec import decode_event
from herdbook.natsd.embedded import EmbeddedNats
from tests.conftest import free_port, herd, wait_until
from tests.e2e.conftest import Fleet

pytestmark = pytest.mark.e2e

CONFIG = """
lifecycle:
  heartbeat_timeout: 1s
  grace_period: {standard: 1500ms}
approval: {auto_approve: true}
scheduler: {unblock_delay: 100ms}
leader_ttl: 2s
"""


class Replicas(Fleet):
    """The e2e fleet's processes, against a nats-server of their own (no `herd up`
    embeds it: both control planes use --nats-url)."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.server = EmbeddedNats(tmp / "nats", port=free_port())

    def plane(self, name: str) -> subprocess.Popen[bytes]:
        (self.tmp / "herd.yaml").write_text(CONFIG)
        return self.spawn(name, "up", "--nats-url", self.url, "--config",
                          str(self.tmp / "herd.yaml"), "--data-dir", str(self.tmp / name),
                          "--node-id", name)

    def events(self) -> list[Any]:
        async def read() -> list[Any]:
            import nats
            nc = await nats.connect(self.url)
            try:
                js = nc.jetstream()
                info = await js.stream_info("HERD_EVENTS")
                out = []
                for seq in range(1, int(info.state.last_seq) + 1):
                    msg = await js.get_msg("HERD_EVENTS", seq)
                    out.append(decode_event(msg.data or b""))
                return out
            finally:
                await nc.close()
        return asyncio.run(read())

    def stop(self) -> None:
        super().stop()          # the processes, then the workloads the agents left
        self.server.stop()

    @classmethod
    @contextlib.contextmanager
    def running(cls, tmp: Path) -> Iterator[Self]:
        """Its nats-server started, everything stopped at the end (every replica fixture)."""
        r = cls(tmp)
        r.server.start()
        r.url = r.server.url
        try:
            yield r
        finally:
            r.stop()


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    with Replicas.running(tmp_path) as r:
        yield r


def status(url: str) -> dict[str, Any]:
    return dict(json.loads(herd("status", "-o", "json", server=url, check=True).stdout))


def leading_replica(url: str) -> str:
    """The replica that leads, asked through the API until one says so (the queue group
    spreads the questions over the replicas); exactly one may."""
    leaders: list[str] = []
    for _ in range(20):
        answers = [status(url) for _ in range(6)]
        leaders = sorted({a["instance"] for a in answers if a["leader"]})
        if leaders:
            break
    assert len(leaders) == 1, leaders
    return leaders[0]


def test_two_replicas_append_every_transition_once_and_survive_a_sigkill(
        replicas: Replicas, tmp_path: Path) -> None:
    planes = {name: replicas.plane(name) for name in ("cp-a", "cp-b")}
    wait_until(lambda: herd("node", "list", server=replicas.url).returncode == 0, timeout=30)
    agents = {n: replicas.agent(n) for n in ("w1", "w2", "w3")}
    wait_until(lambda: all(replicas.nodes().get(n, {}).get("state") == "READY"
                           for n in (*agents, *planes)), timeout=30, what="fleet READY")

    # a job: placed once, by the leader alone
    spec = tmp_path / "job.yaml"
    spec.write_text('id: train\ncount: 2\ncommand: ["sleep", "300"]\n'
                    "resources: {cpu: 0.01, memory_mb: 1, gpus: 1}\n")
    assert herd("job", "run", str(spec), server=replicas.url).returncode == 0

    def allocs() -> list[dict[str, Any]]:
        out = herd("alloc", "list", "-o", "json", server=replicas.url, check=True)
        return list(json.loads(out.stdout))

    wait_until(lambda: len([a for a in allocs() if a["status"] == "running"]) == 2,
               timeout=30, what="2 running")

    # nodes die: both replicas' sweepers see it; the stream holds each transition once
    for name in ("w1", "w2"):
        agents[name].send_signal(signal.SIGKILL)
        agents[name].wait()
    wait_until(lambda: all(replicas.nodes()[n]["state"] == "DOWN" for n in ("w1", "w2")),
               timeout=20, what="w1, w2 DOWN")

    # the leader is SIGKILLed: the API still answers, the other replica takes over
    leader = leading_replica(replicas.url)
    survivor = "cp-b" if leader == "cp-a" else "cp-a"
    planes[leader].send_signal(signal.SIGKILL)
    planes[leader].wait()
    assert herd("node", "list", server=replicas.url).returncode == 0
    wait_until(lambda: status(replicas.url)["leader"], timeout=15, what="a new leader")
    assert status(replicas.url)["instance"] == survivor
    wait_until(lambda: replicas.nodes()[leader]["state"] == "DOWN", timeout=20,
               what="the killed replica's own node DOWN")
    # the new leader schedules: w1 and w2 are DOWN, so their allocations move to w3
    wait_until(lambda: len([a for a in allocs() if a["status"] == "running"
                            and a["node_id"] == "w3"]) == 2, timeout=30,
               what="allocations requeued by the new leader")

    events = replicas.events()
    transitions = Counter((e.aggregate_id, e.event_name) for e in events
                          if e.event_name in ("degraded", "down", "approved", "recovered"))
    for node_id in ("w1", "w2", leader):
        assert transitions[(node_id, "degraded")] == 1, transitions
        assert transitions[(node_id, "down")] == 1, transitions
    for node_id in ("w1", "w2", "w3"):
        assert transitions[(node_id, "approved")] == 1, transitions
    placed = [e for e in events if e.event_name.endswith(".placed")]
    assert len({(e.job_id, e.index, e.requeue_count) for e in placed}) == len(placed)
    assert sum(1 for e in placed if e.requeue_count == 0) == 2
