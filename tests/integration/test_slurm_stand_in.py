"""The Slurm notifier with a stand-in scontrol script (and the documented kubectl
template with a stand-in kubectl): each runs as a process, so not in tests/unit (node
names, command lines and Slurm's states are tested there: tests/unit/test_slurm.py)."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from herdbook.config import parse_config
from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.node import NodeInfo, NodeNotificationFailed, NodeRegistered, NodeUndrained
from herdbook.events.states import Health
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.notifier import Notifier, has_drain_status
from herdbook.reactors.notifier_deciders import action_for, reason_for
from tests.fakes import FakeClock, FakeProjector, FakeStore


def scontrol(tmp_path: Path, body: str) -> Path:
    """A stand-in scontrol: logs its arguments and SLURM_CONF, then runs ``body``."""
    path = tmp_path / "scontrol"
    log = tmp_path / "calls"
    path.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s|" "$a"; done >> {log}\n'
                    f'printf "\\nconf=%s\\n" "$SLURM_CONF" >> {log}\n{body}\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def notifier(tmp_path: Path, body: str, node_name: str = "{label:slurm}",
             ) -> tuple[Notifier, FakeStore]:
    config = parse_config(
        f"notifier: {{type: slurm, retries: 1, backoff: 10ms, slurm: {{scontrol: "
        f"'{scontrol(tmp_path, body)}', conf: /etc/x.conf, node_name: '{node_name}'}}}}")
    projector = FakeProjector()
    store = FakeStore(projector)
    store.fold(NodeRegistered(node_id="gpu-1", boot_id="b",
                              info=NodeInfo(labels={"slurm": "cn7"})))
    clock = FakeClock()
    return Notifier(config.notifier, projector, clock=clock,  # type: ignore[arg-type]
                    runner=DecideRunner(store, projector, clock)), store  # type: ignore[arg-type]


async def test_a_drain_runs_scontrol_without_a_shell_for_the_labelled_node(
        tmp_path: Path) -> None:
    n, store = notifier(tmp_path, 'if [ "$1" = -o ]; then echo "NodeName=cn7 State=IDLE+DRAIN '
                                  'Reason=herdbook: it\'s hot"; fi')
    assert action_for(NodeUndrained(node_id="gpu-1")) == "undrain"
    assert await n.notify("drain", "gpu-1", "it's hot; $(reboot)")
    assert await n.notify("undrain", "gpu-1", "")
    assert (tmp_path / "calls").read_text().splitlines() == [
        "update|NodeName=cn7|State=DRAIN|Reason=herdbook: it's hot; $(reboot)|",
        "conf=/etc/x.conf",
        "-o|show|node|cn7|",
        "conf=/etc/x.conf",
        "update|NodeName=cn7|State=RESUME|",
        "conf=/etc/x.conf"]
    assert store.appended == []


async def test_scontrol_failing_is_retried_then_recorded(tmp_path: Path) -> None:
    n, store = notifier(tmp_path, "echo 'slurm_update error: Invalid node name specified'; exit 1")
    assert not await n.notify("cordon", "gpu-1", "")
    [(event, _)] = store.appended
    assert isinstance(event, NodeNotificationFailed) and event.attempts == 2
    assert "exited 1: slurm_update error: Invalid node name specified" in event.reason


async def test_a_node_without_the_label_is_a_recorded_failure(tmp_path: Path) -> None:
    n, store = notifier(tmp_path, "exit 0", node_name="{label:missing}")
    assert not await n.notify("drain", "gpu-1", "")
    [(event, _)] = store.appended
    assert isinstance(event, NodeNotificationFailed) and "no label 'missing'" in event.reason
    assert not (tmp_path / "calls").exists()


async def test_resume_releases_only_a_drain_herdbook_set(tmp_path: Path) -> None:
    show = 'if [ "$1" = -o ]; then echo "NodeName=cn7 State={state} Reason={reason}"; fi'
    # herdbook's own drain: RESUME
    n, store = notifier(tmp_path, show.format(state="IDLE+DRAIN",
                                              reason="herdbook: PSU swap [slurm@2026-11-23T10:00:00]"))
    assert await n.notify("uncordon", "gpu-1", "")
    assert "update|NodeName=cn7|State=RESUME|" in (tmp_path / "calls").read_text().splitlines()
    assert store.appended == []
    # neither drained nor down by us (IDLE, or Slurm's own DOWN): nothing to resume, done
    for state in ("IDLE", "DOWN+NOT_RESPONDING"):
        (tmp_path / "calls").unlink()
        n, store = notifier(tmp_path, show.format(state=state, reason="Not responding"))
        assert await n.notify("undrain", "gpu-1", "")
        assert not any(c.startswith("update") for c in (tmp_path / "calls").read_text().splitlines())
        assert store.appended == []
    # an admin's drain is not herdbook's to release: recorded, never resumed
    (tmp_path / "calls").unlink()
    n, store = notifier(tmp_path, show.format(state="IDLE+DRAIN", reason="bad DIMM [root@t]"))
    assert not await n.notify("uncordon", "gpu-1", "")
    [(event, _)] = store.appended
    assert isinstance(event, NodeNotificationFailed)
    assert "held for another reason ('bad DIMM'); not resumed" in event.reason
    assert not any(c.startswith("update") for c in (tmp_path / "calls").read_text().splitlines())


async def test_drain_status_asks_scontrol_show_node(tmp_path: Path) -> None:
    n, _ = notifier(tmp_path, "echo 'NodeName=cn7 State=IDLE+DRAIN Reason=x'")
    assert has_drain_status(n.config)
    drained, message = await n.drained("gpu-1")
    assert drained and message == "Slurm node cn7 is IDLE+DRAIN"
    assert (tmp_path / "calls").read_text().splitlines()[0] == "-o|show|node|cn7|"


async def test_a_missing_scontrol_is_a_one_line_failure(tmp_path: Path) -> None:
    config = parse_config(f"notifier: {{type: slurm, retries: 0, slurm: "
                          f"{{scontrol: '{tmp_path / 'nope'}'}}}}")
    projector = FakeProjector()
    store = FakeStore(projector)
    store.fold(NodeRegistered(node_id="gpu-1", boot_id="b"))
    clock = FakeClock()
    n = Notifier(config.notifier, projector, clock=clock,  # type: ignore[arg-type]
                 runner=DecideRunner(store, projector, clock))  # type: ignore[arg-type]
    assert not await n.notify("drain", "gpu-1", "")
    [(event, _)] = store.appended
    assert isinstance(event, NodeNotificationFailed)
    assert event.reason == f"{tmp_path / 'nope'}: No such file or directory"


def documented(title: str) -> str:
    """The YAML block under ``### <title>`` in docs/health.md."""
    page = (Path(__file__).parents[2] / "docs" / "health.md").read_text()
    section = page[page.index(f"### {title}"):]
    return section[section.index("```yaml\n") + 8:section.index("\n```", section.index("```yaml"))]


def test_the_documented_slurm_config_loads() -> None:
    config = parse_config(documented("Slurm")).notifier
    assert (config.type, config.slurm.node_name) == ("slurm", "{label:slurm-node}")


async def test_the_documented_kubernetes_template_runs_kubectl(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = scontrol(bin_dir, "exit 0")
    kubectl.rename(bin_dir / "kubectl")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    config = parse_config(documented("Kubernetes")).notifier
    projector = FakeProjector()
    store = FakeStore(projector)
    store.fold(NodeRegistered(node_id="gpu-1", boot_id="b"))
    clock = FakeClock()
    n = Notifier(config, projector, clock=clock,  # type: ignore[arg-type]
                 runner=DecideRunner(store, projector, clock))  # type: ignore[arg-type]
    assert await n.notify("drain", "gpu-1", "XID 79 on GPU 3")
    assert (await n.drained("gpu-1"))[0]
    assert await n.notify("undrain", "gpu-1", "")
    assert (bin_dir / "calls").read_text().split("\n")[::2][:-1] == [
        "cordon|gpu-1|",
        "annotate|node|gpu-1|--overwrite|herdbook.io/reason=XID 79 on GPU 3|",
        "drain|gpu-1|--ignore-daemonsets|--delete-emptydir-data|--timeout=20s|",
        "uncordon|gpu-1|"]


async def test_a_node_the_policy_makes_unhealthy_is_drained_in_slurm_with_the_verdict(
        tmp_path: Path) -> None:
    """Issue 19: herdbook places nothing on an UNHEALTHY node, so Slurm must not either."""
    unhealthy = NodeHealthChanged(node_id="gpu-1", health=Health.UNHEALTHY,
                                  reason="fatal-xid: XID 79 on GPU 3", fatal=True)
    assert action_for(unhealthy) == "cordon"
    assert reason_for(unhealthy) == "unhealthy: fatal-xid: XID 79 on GPU 3"
    for health in (Health.HEALTHY, Health.DEGRADED):
        assert action_for(NodeHealthChanged(node_id="gpu-1", health=health)) is None
    n, store = notifier(tmp_path, "exit 0")
    await n.start()
    try:
        store.fold(unhealthy)
        for _ in range(200):
            if n.sent:
                break
            await asyncio.sleep(0.01)
    finally:
        await n.stop()
    assert (tmp_path / "calls").read_text().splitlines()[0] == (
        "update|NodeName=cn7|State=DRAIN|Reason=herdbook: unhealthy: fatal-xid: XID 79 on GPU 3|")
