"""`herd` imports a command's module when that command runs (issue 17): `herd node list`
imports neither rich nor the modules of other commands before it connects, and
`herd --help` nothing of NATS or the control plane. Checked on ``sys.modules`` in a
fresh interpreter, never on time."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import herdbook.cli.client as client
def stop(server, fn):
    print(json.dumps(sorted(sys.modules)))
    raise SystemExit(0)
client.run = stop          # where `herd node list` would connect
from herdbook.cli.main import main
sys.argv = ["herd", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""


def modules_after(*args: str) -> list[str]:
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
                            text=True, timeout=60, check=True)
    first = next(line for line in result.stdout.splitlines() if line.startswith("[\""))
    loaded: list[str] = json.loads(first)
    return loaded


OTHER_COMMANDS = ("herdbook.cli.up", "herdbook.cli.sim", "herdbook.cli.top",
                  "herdbook.cli.agent", "herdbook.cli.events", "herdbook.cli.audit",
                  "herdbook.cli.cluster", "herdbook.cli.fleet", "herdbook.cli.health",
                  "herdbook.cli.view", "herdbook.control")


def test_node_list_imports_no_rich_and_no_other_command_before_it_connects() -> None:
    loaded = modules_after("node", "list", "-o", "json")
    assert "herdbook.cli.node" in loaded
    assert not [m for m in loaded if m == "rich" or m.startswith("rich.")]
    assert not [m for m in loaded if m.startswith(OTHER_COMMANDS)]


def test_help_imports_no_nats_and_no_control_plane() -> None:
    loaded = modules_after("--help")
    assert "herdbook.cli.up" in loaded      # every command's help line is shown
    assert not [m for m in loaded if m == "nats" or m.startswith(("nats.", "herdbook.control",
                                                                   "herdbook.api.nodes"))]
