"""One control-plane node id, one live process (issue 26 item 1): a second `herd up` on
the same NATS under the same --node-id (the default is the host name: two replicas on one
host) is refused with one line naming the holder, and the leadership does not flap; a
replica restarted on its own data dir takes its node id back at once."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import herd, wait_until
from tests.e2e.test_replicas import CONFIG, Replicas

pytestmark = pytest.mark.e2e


def plane_as(r: Replicas, name: str, node_id: str) -> subprocess.Popen[bytes]:
    (r.tmp / "herd.yaml").write_text(CONFIG)
    return r.spawn(name, "up", "--nats-url", r.url, "--config", str(r.tmp / "herd.yaml"),
                   "--data-dir", str(r.tmp / name), "--node-id", node_id)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Replicas]:
    """A nats-server of its own, and the `herd up` processes each test starts on it."""
    with Replicas.running(tmp_path) as r:
        yield r


def leading(url: str) -> bool:
    """A control plane answers, and it leads."""
    out = herd("status", "-o", "json", server=url)
    return out.returncode == 0 and json.loads(out.stdout).get("leader") is True


def first_leading(r: Replicas) -> subprocess.Popen[bytes]:
    """`herd up` as node id cp on the data dir "first", once it leads."""
    first = plane_as(r, "first", "cp")
    wait_until(lambda: leading(r.url), timeout=60, what="the first replica to lead")
    return first


def log_of(r: Replicas, name: str) -> str:
    return (r.tmp / f"{name}.log").read_text()


def test_a_second_control_plane_with_the_same_node_id_is_refused(cluster: Replicas) -> None:
    r = cluster
    first = first_leading(r)
    second = plane_as(r, "second", "cp")
    assert second.wait(60) == 1
    log = log_of(r, "second")
    assert "Traceback" not in log
    errors = [line for line in log.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, log
    assert "another control plane runs with node id cp" in errors[0]
    assert f"host {socket.gethostname()}, pid {first.pid}, since " in errors[0]

    # The first one led all along: no step-down, no second election.
    time.sleep(3)
    assert first.poll() is None
    assert "no longer the leader" not in log_of(r, "first")
    assert log_of(r, "first").count("is the leader") == 1


def test_a_replica_restarted_on_its_data_dir_takes_its_node_id_back(cluster: Replicas) -> None:
    r = cluster
    first = first_leading(r)
    first.send_signal(signal.SIGKILL)
    first.wait()
    again = plane_as(r, "first", "cp")      # same data dir: same instance
    wait_until(lambda: leading(r.url), timeout=60,
               what="the restarted replica to lead")
    assert again.poll() is None
    assert "watching it" not in log_of(r, "first")


def test_a_dead_replica_of_another_data_dir_is_waited_out(cluster: Replicas) -> None:
    """Its key is not renewed: the newcomer takes the node id within a TTL and a half."""
    r = cluster
    first = first_leading(r)
    first.send_signal(signal.SIGKILL)
    first.wait()
    second = plane_as(r, "second", "cp")
    wait_until(lambda: leading(r.url) and second.poll() is None,
               timeout=60, what="the newcomer to lead")
    assert second.poll() is None
