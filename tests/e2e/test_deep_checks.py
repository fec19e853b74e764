"""The deeper node checks and the recommended action end to end (issue 29 items 3-4): real
nats-server, control plane and `herd agent` processes with fake GPUs and a fake
InfiniBand sysfs tree; a webhook receiver on 127.0.0.1.

- an NVLink link taken down makes the node UNHEALTHY after two reports (`nvlink-down`),
  and the cordon the webhook receives, node.health_changed, `herd node describe` and
  `herd gpu describe` all say `reset_gpu`;
- an InfiniBand port that goes DOWN in the sysfs tree does the same with
  `inspect_hardware`;
- XID 79 says `reboot_node`, and `herd node describe` offers `herd node reboot`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import herd, wait_until
from tests.e2e.conftest import Fleet
from tests.servers import QuietHandler, serving_http

pytestmark = pytest.mark.e2e


@pytest.fixture
def webhook() -> Iterator[tuple[list[dict[str, Any]], str]]:
    calls: list[dict[str, Any]] = []

    class Handler(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            calls.append({"path": self.path, **self.json_body()})
            self.send_response(200)
            self.end_headers()

    with serving_http(Handler) as base:
        yield calls, base


def config(base: str) -> str:
    return f"""
lifecycle: {{heartbeat_timeout: 5s, grace_period: {{standard: 30s}}}}
approval: {{auto_approve: true}}
breaker: {{min_nodes: 10}}      # three nodes taken out on purpose
notifier:
  type: webhook
  retries: 1
  backoff: 100ms
  webhook: {{cordon_url: {base}/cordon, timeout: 2s}}
"""


def ib_port(root: Path, state: str) -> None:
    base = root / "mlx5_0" / "ports" / "1"
    (base / "counters").mkdir(parents=True, exist_ok=True)
    (base / "state").write_text(state + "\n")
    (base / "phys_state").write_text(("5: LinkUp" if "ACTIVE" in state else "2: Polling") + "\n")
    (base / "counters" / "link_downed").write_text("0\n")


def unhealthy_change(fleet: Fleet, node_id: str) -> dict[str, Any] | None:
    out = herd("events", "tail", "-n", "50", "-o", "json", "--subject",
               f"herd.node.{node_id}.health_changed", server=fleet.url, check=True)
    found = [json.loads(line) for line in out.stdout.splitlines()]
    return next((e for e in found if e.get("health") == "UNHEALTHY"), None)


def test_deeper_faults_carry_their_action_to_every_reader(
        fleet: Fleet, webhook: tuple[list[dict[str, Any]], str], tmp_path: Path) -> None:
    calls, base = webhook
    ib = tmp_path / "infiniband"
    ib_port(ib, "4: ACTIVE")
    fleet.up(config(base))
    fleet.agent("gpu-1", "--fake-gpus", "2", "--health-interval", "0.3s")
    fleet.agent("gpu-2", "--fake-gpus", "2", "--health-interval", "0.3s",
                "--ib-sysfs", str(ib))
    fleet.agent("gpu-3", "--fake-gpus", "2", "--health-interval", "0.3s")
    for node in ("gpu-1", "gpu-2", "gpu-3"):
        wait_until(lambda n=node: fleet.nodes().get(n, {}).get("health") == "HEALTHY",  # type: ignore[misc]
                   timeout=30, what=f"{node} HEALTHY")

    # NVLink link 3 of GPU 1 down: unhealthy on two reports in a row
    assert herd("agent", "inject", "--node", "gpu-1", "nvlink-down", "3", "--gpu", "1",
                server=fleet.url).returncode == 0
    change = wait_until(lambda: unhealthy_change(fleet, "gpu-1"), timeout=30,
                        what="gpu-1 UNHEALTHY")
    assert change["recommended_action"] == "reset_gpu"
    assert "nvlink-down: NVLink link 3 down (17 of 18 up) on GPU 1" in change["reason"]
    assert change["gpus"]["1"]["recommended_action"] == "reset_gpu"
    assert fleet.describe("gpu-1")["recommended_action"] == "reset_gpu"
    gpu = json.loads(herd("gpu", "describe", "gpu-1/1", "-o", "json", server=fleet.url,
                          check=True).stdout)
    assert gpu["recommended_action"] == "reset_gpu"
    assert gpu["verdict"]["recommended_action"] == "reset_gpu"
    table = herd("gpu", "describe", "gpu-1/1", server=fleet.url, check=True).stdout
    assert table.rstrip().endswith("recommended: reset the GPU")
    cordon = wait_until(lambda: next((c for c in calls if c["node_id"] == "gpu-1"), None),
                        timeout=15, what="gpu-1's cordon webhook")
    assert cordon["event"] == "cordon" and cordon["recommended_action"] == "reset_gpu"

    # the InfiniBand port goes DOWN under the agent
    ib_port(ib, "1: DOWN")
    change = wait_until(lambda: unhealthy_change(fleet, "gpu-2"), timeout=30,
                        what="gpu-2 UNHEALTHY")
    assert change["recommended_action"] == "inspect_hardware"
    assert "ib-port-down: InfiniBand mlx5_0 port 1 DOWN, Polling" in change["reason"]
    cordon = wait_until(lambda: next((c for c in calls if c["node_id"] == "gpu-2"), None),
                        timeout=15, what="gpu-2's cordon webhook")
    assert cordon["recommended_action"] == "inspect_hardware"

    # XID 79: reboot, and describe offers the command
    assert herd("agent", "inject", "--node", "gpu-3", "xid", "79", "--gpu", "0",
                server=fleet.url).returncode == 0
    change = wait_until(lambda: unhealthy_change(fleet, "gpu-3"), timeout=30,
                        what="gpu-3 UNHEALTHY")
    assert change["recommended_action"] == "reboot_node"
    table = herd("node", "describe", "gpu-3", server=fleet.url, check=True).stdout
    assert "recommended: reboot the node: herd node reboot gpu-3" in table
