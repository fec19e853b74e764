"""`herd nats config --auth`: the servers' files and the users they include, rendered by
the embedded server's own functions; `herd creds --config-dir` changes them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from herdbook.cli.main import app
from herdbook.natsd.cluster_config import (
    ClusterConfigError,
    Layout,
    members,
    render_server,
)
from herdbook.natsd.users import (
    operator_permissions,
)
from herdbook.web.openapi import READS

ROUTES = "nats-route://10.0.0.1:6222,nats-route://10.0.0.2:6222,nats-route://10.0.0.3:6222"


def users_of(conf: Path) -> dict[str, dict[str, object]]:
    """users.conf's entries by user name (each entry is one JSON line)."""
    entries = [json.loads(line.strip().rstrip(",")) for line in conf.read_text().splitlines()
               if line.strip().startswith("{")]
    return {entry["user"]: entry for entry in entries}


def test_one_server_per_route_and_ports_count_up_only_on_a_shared_host() -> None:
    apart = members(Layout(routes=ROUTES.split(",")))
    assert [(m.name, m.host, m.client_port, m.monitor_port) for m in apart] == [
        ("n1", "10.0.0.1", 4222, 8222), ("n2", "10.0.0.2", 4222, 8222),
        ("n3", "10.0.0.3", 4222, 8222)]
    local = members(Layout(routes=[f"nats-route://127.0.0.1:{p}" for p in (6222, 6223, 6224)]))
    assert [m.client_port for m in local] == [4222, 4223, 4224]


@pytest.mark.parametrize(("routes", "why"), [
    ([], "one route URL per server"),
    (["nats-route://a:1", "nats-route://b:1"], "use 1, 3 or 5"),
    (["nats://a:6222"], "not nats-route://HOST:PORT"),
    (["nats-route://a"], "not nats-route://HOST:PORT"),
    (["nats-route://a:1", "nats-route://a:1", "nats-route://b:1"], "named twice"),
])
def test_routes_that_cannot_make_a_cluster_are_refused(routes: list[str], why: str) -> None:
    with pytest.raises(ClusterConfigError, match=re.escape(why)):
        members(Layout(routes=routes))


def test_a_server_routes_to_the_others_with_the_route_user_and_includes_the_users() -> None:
    layout = Layout(routes=ROUTES.split(","), tls_cert="/etc/nats/s.pem",
                    tls_key="/etc/nats/s.key", tls_ca="/etc/nats/ca.pem")
    everyone = members(layout)
    text = render_server(layout, everyone[0], everyone, "sekret")
    assert 'server_name: "n1"' in text and 'include "users.conf"' in text
    assert '"nats-route://herd-route:sekret@10.0.0.2:6222"' in text
    assert "10.0.0.1:6222\"\n" not in text.split("routes: [")[1]    # not to itself
    assert text.count('cert_file: "/etc/nats/s.pem"') == 2           # clients and routes
    assert 'http: "127.0.0.1:8222"' in text                           # monitoring: loopback


def test_a_reader_may_call_the_read_routes_and_nothing_else() -> None:
    allowed = operator_permissions("op-bob", read_only=True)["publish"]["allow"]
    api = {s for s in allowed if s.startswith("herd.api.")}
    assert api == {f"herd.api.v1.{route}.op-bob" for route in READS}
    assert "herd.api.v1.node.approve.op-bob" not in api
    assert not any(s.startswith("herd.agent.") for s in allowed)


@pytest.mark.parametrize(("args", "why"), [
    ((), "pass --auth"),
    (("--auth", "--cluster-routes", "nats-route://a:1,nats-route://b:1"), "use 1, 3 or 5"),
    (("--auth", "--cluster-routes", ROUTES, "--tls-cert", "c.pem"), "go together"),
])
def test_bad_options_are_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...],
                                             why: str) -> None:
    result = CliRunner().invoke(app, ["nats", "config", "--out", str(tmp_path / "c"), *args])
    assert result.exit_code == 2
    assert why in result.output and "Traceback" not in result.output
