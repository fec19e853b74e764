"""`herd events tail` against `herd up --auth`: a credential that may not read the stream
is told permission denied in one line at once (exit 1), not a timeout or, with
``--follow``, a wait forever."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from herdbook.control.plane import ControlPlane
from herdbook.natsd.users import UserRegistry
from tests.conftest import herd
from tests.integration.test_agent_and_control import eventually
from tests.integration.test_auth import issue, plane, server_log  # noqa: F401 - fixture


async def test_an_agents_tail_is_denied_at_once(
        plane: ControlPlane, tmp_path: Path) -> None:  # noqa: F811
    creds = await issue(tmp_path, "agent", "gpu-1")
    for args in (["events", "tail"], ["events", "tail", "-f", "--subject", "herd.job.>"]):
        started = time.monotonic()
        denied = await asyncio.to_thread(herd, "--creds", str(creds), *args, timeout=20)
        assert time.monotonic() - started < 5, args
        assert (denied.returncode, denied.stdout) == (1, ""), (args, denied.stderr)
        assert denied.stderr == "Error: permission denied: $JS.API.STREAM.INFO.HERD_EVENTS\n"


RELOADED = "Reloaded server configuration"


def _deny(registry: UserRegistry, user: str, subject: str) -> None:
    """Take a publish right from ``user`` in users.conf (one JSON entry per line) and have
    the server re-read it: an operator without the right to pull from a consumer."""
    lines = []
    for line in registry.conf_path.read_text().splitlines():
        body = line.strip().rstrip(",")
        if body.startswith("{") and json.loads(body)["user"] == user:
            entry = json.loads(body)
            entry["permissions"]["publish"]["deny"].append(subject)
            line = "    " + json.dumps(entry) + ("," if line.rstrip().endswith(",") else "")
        lines.append(line)
    registry.conf_path.write_text("\n".join(lines) + "\n")
    assert registry.reload_server()


async def test_a_follow_the_user_may_not_pull_is_denied_at_once(
        plane: ControlPlane, tmp_path: Path) -> None:  # noqa: F811
    creds = await issue(tmp_path, "operator", "--name", "carol")
    allowed = await asyncio.to_thread(herd, "--creds", str(creds), "events", "tail", "-n", "1")
    assert allowed.returncode == 0, allowed.stderr
    reloads = server_log(plane).count(RELOADED)
    _deny(UserRegistry(tmp_path / "d" / "nats"), "op-carol", "$JS.API.CONSUMER.MSG.NEXT.>")

    async def reloaded() -> bool:   # the server re-reads users.conf on SIGHUP, in a while
        return server_log(plane).count(RELOADED) > reloads

    await eventually(reloaded, timeout=10)
    started = time.monotonic()
    denied = await asyncio.to_thread(herd, "--creds", str(creds), "events", "tail", "-n", "0",
                                     "-f", timeout=20)
    assert time.monotonic() - started < 5
    assert (denied.returncode, denied.stdout) == (1, ""), denied.stderr
    assert denied.stderr.startswith(
        "Error: permission denied: $JS.API.CONSUMER.MSG.NEXT.HERD_EVENTS.herd-feed-")
    assert denied.stderr.count("\n") == 1
