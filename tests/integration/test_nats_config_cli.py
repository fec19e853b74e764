"""`herd nats config --auth` and `herd creds --config-dir` as processes: the files they
write are the ones the embedded server would, and creds change them. Moved from
tests/unit/test_nats_config.py (it runs `herd`); the rendering is tested there."""

from __future__ import annotations

import json
from pathlib import Path

from herdbook.natsd.cluster_config import read_cluster
from herdbook.natsd.users import UserRegistry, agent_permissions, operator_permissions, render
from tests.conftest import herd
from tests.unit.test_nats_config import ROUTES, users_of


def test_the_cli_writes_users_the_embedded_server_would_and_creds_change_them(
        tmp_path: Path) -> None:
    out = tmp_path / "cluster"
    result = herd("nats", "config", "--auth", "--out", str(out), "--cluster-routes", ROUTES)
    assert result.returncode == 0, result.stderr
    for name in ("n1.conf", "n2.conf", "n3.conf", "users.conf", "users.json",
                 "herd-control.creds", "routes.json"):
        assert (out / name).stat().st_mode & 0o777 == 0o600, name
    cluster = read_cluster(out)
    assert cluster is not None and cluster.urls == [
        "nats://10.0.0.1:4222", "nats://10.0.0.2:4222", "nats://10.0.0.3:4222"]
    assert list(users_of(out / "users.conf")) == ["herd-control"]

    for args in (("agent", "gpu-1"), ("operator", "alice"), ("operator", "bob", "--reader")):
        made = herd("creds", *args, "--config-dir", str(out), "--out",
                    str(tmp_path / f"{args[1]}.creds"))
        assert made.returncode == 0, made.stderr
        assert "nats-server --signal reload" in made.stdout
    creds = json.loads((tmp_path / "gpu-1.creds").read_text())
    assert creds["url"] == ",".join(cluster.urls)
    # one function renders users.conf for the embedded server and for the cluster
    assert (out / "users.conf").read_text() == render(UserRegistry(out).users())
    users = users_of(out / "users.conf")
    assert users["agent-gpu-1"]["permissions"] == agent_permissions("gpu-1")
    assert users["op-alice"]["permissions"] == operator_permissions("op-alice")
    assert users["op-bob"]["permissions"] == operator_permissions("op-bob", read_only=True)

    assert herd("creds", "revoke", "agent-gpu-1", "--config-dir", str(out)).returncode == 0
    assert "agent-gpu-1" not in users_of(out / "users.conf")
