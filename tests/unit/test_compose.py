"""docker-compose.yml and the Dockerfile, checked without Docker.

Every service built from the Dockerfile runs `herd <command...>` (the image's ENTRYPOINT),
so its `command:` is parsed with the real CLI's click machinery, down into the subcommand,
without invoking anything: an unknown option, a bad value or a missing command fails here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from herdbook.cli.main import app
from herdbook.cli.node import parse_labels

try:  # typer >= 0.2x vendors click
    from typer._click.exceptions import NoSuchOption, UsageError
except ImportError:  # pragma: no cover - typer on top of the click package
    from click.exceptions import NoSuchOption, UsageError  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
HERD_SERVICES = sorted(name for name, svc in SERVICES.items() if "build" in svc)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI reads these from the environment; only the compose command may supply them.
    monkeypatch.delenv("HERD_SERVER", raising=False)
    monkeypatch.delenv("HERD_INSTANCE_ID", raising=False)


def parse_herd(args: Sequence[str]) -> tuple[Any, str, Any]:
    """Parse `herd *args` like the CLI would, without running it.

    Returns (root context, subcommand name, subcommand context); raises UsageError."""
    group = typer.main.get_command(app)
    ctx = group.make_context("herd", list(args), resilient_parsing=False)
    # The group leaves the subcommand name in the protected args: a private attribute in
    # click >= 8.2 (the public property warns) and in typer's vendored click; public before.
    protected = getattr(ctx, "_protected_args", None)
    if protected is None:  # pragma: no cover - click < 8.2
        protected = ctx.protected_args
    rest = [*protected, *ctx.args]
    if not rest:
        ctx.fail("Missing command.")
    name, sub, sub_args = group.resolve_command(ctx, rest)
    assert name is not None and sub is not None
    sub_ctx = sub.make_context(name, sub_args, parent=ctx)
    return ctx, name, sub_ctx


def command_of(service: str) -> list[str]:
    command = SERVICES[service]["command"]
    assert isinstance(command, list), f"{service}: write command: as a YAML list"
    assert all(isinstance(arg, str) for arg in command), f"{service}: quote every argument"
    return command


def depends_on(service: str) -> set[str]:
    deps = SERVICES[service].get("depends_on", [])
    return set(deps)  # a list, or a mapping whose keys are the services


def named_mounts(service: str) -> dict[str, str]:
    """Named volume -> mount point, for the short `name:/path` syntax."""
    mounts = {}
    for spec in SERVICES[service].get("volumes", []):
        source, _, target = str(spec).partition(":")
        if source in (COMPOSE.get("volumes") or {}):
            mounts[source] = target.split(":")[0]
    return mounts


def on_volume(service: str, path: str) -> bool:
    return any(path == target or path.startswith(target.rstrip("/") + "/")
               for target in named_mounts(service).values())


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
])
def test_validator_rejects_bad_invocations(args: list[str], error: type[Exception]) -> None:
    with pytest.raises(error):
        parse_herd(args)


def test_validator_accepts_and_parses_a_good_invocation() -> None:
    root, name, sub = parse_herd(["-s", "nats://x:4222", "agent", "--fake-gpus", "2"])
    assert (root.params["server"], name, sub.params["fake_gpus"]) == ("nats://x:4222", "agent", 2)


# -- docker-compose.yml -------------------------------------------------------------------

def test_nats_runs_jetstream_on_a_named_volume() -> None:
    nats = SERVICES["nats"]
    image, _, tag = nats["image"].partition(":")
    assert image in ("nats", "library/nats", "docker.io/library/nats")
    match = re.match(r"(\d+)\.(\d+)", tag)
    assert match and (int(match[1]), int(match[2])) >= (2, 11) and match[1] == "2", tag
    command = nats["command"]
    command = command.split() if isinstance(command, str) else command
    assert "-js" in command or "--jetstream" in command
    flag = "-sd" if "-sd" in command else "--store_dir"
    store = command[command.index(flag) + 1]
    assert on_volume("nats", store), f"JetStream store {store} is not on a named volume"


def test_services_built_from_the_dockerfile() -> None:
    assert {"control", "agent-1", "agent-2"} <= set(HERD_SERVICES)
    for name in HERD_SERVICES:
        build = SERVICES[name]["build"]
        context = build if isinstance(build, str) else build.get("context", ".")
        dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile",
                                                                          "Dockerfile")
        assert (ROOT / context / dockerfile).resolve() == ROOT / "Dockerfile", name


@pytest.mark.parametrize("service", HERD_SERVICES)
def test_command_is_a_valid_herd_invocation(service: str) -> None:
    _, name, _ = parse_herd(command_of(service))
    assert name in ("up", "agent")


def test_control_uses_the_nats_service_and_manual_approval() -> None:
    command = command_of("control")
    assert "--nats-url" in command
    _, name, sub = parse_herd(command)
    assert name == "up"
    assert sub.params["nats_url"] == "nats://nats:4222"
    assert sub.params["auto_approve"] is False
    assert sub.params["demo"] == 0
    assert sub.params["data_dir"] and on_volume("control", sub.params["data_dir"])
    assert "nats" in depends_on("control")


def test_agents_point_at_the_nats_service() -> None:
    agents = [name for name in HERD_SERVICES if parse_herd(command_of(name))[1] == "agent"]
    assert len(agents) >= 2
    node_ids = set()
    for service in agents:
        root, _, sub = parse_herd(command_of(service))
        assert root.params["server"] == "nats://nats:4222", service
        assert sub.params["node_id"], f"{service}: set --node-id, the hostname is random"
        node_ids.add(sub.params["node_id"])
        assert sub.params["fake_gpus"], f"{service}: no NVML in a container; use --fake-gpus"
        assert parse_labels(sub.params["labels"]), service
        assert on_volume(service, sub.params["state_dir"]), service
        assert "control" in depends_on(service)
    assert len(node_ids) == len(agents)


def test_each_herd_service_has_its_own_volumes() -> None:
    seen: dict[str, str] = {}
    for service in HERD_SERVICES:
        mounts = named_mounts(service)
        assert mounts, service
        for volume in mounts:
            assert volume not in seen, f"{service} shares {volume} with {seen.get(volume)}"
            seen[volume] = service


# -- Dockerfile ---------------------------------------------------------------------------

def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
            for line in lines if line and not line.startswith("#")]


def test_dockerfile_runs_herd_as_a_non_root_user() -> None:
    instructions = dockerfile_instructions()
    last = dict(instructions)
    assert last["FROM"].startswith("python:3.11-slim")
    assert json.loads(last["ENTRYPOINT"]) == ["herd"]
    assert any(op == "RUN" and "pip install --no-cache-dir ." in arg
               for op, arg in instructions)
    assert last["USER"] not in ("root", "0")
    assert last["WORKDIR"] == "/data"
