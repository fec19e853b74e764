"""The CLI's contexts (``cli/contexts.py``, `herd context`), as kubectl's: a setting
comes from its flag, then its environment variable, then the context in use
(``--context``, ``HERD_CONTEXT``, else the file's current one), then the default; in the
typer app and in `herd node list`'s own parser (``cli/entry.py``) alike. An unknown
context or a bad file is one line, exit 2. The server a command went to is read from
its one-line refusal of a port out of range (before any connect): no server starts here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from herdbook.cli import client, entry
from herdbook.cli.contexts import (
    CliConfig,
    CliContext,
    ContextError,
    config_file,
    in_use,
    load,
    pick,
    save,
)
from herdbook.cli.main import app
from herdbook.credentials import NatsAuth

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CLOSED = "nats://127.0.0.1:1"   # nobody listens: connection refused at once (exit 3)


def test_the_file_is_under_the_xdg_config_home_or_where_herd_cli_config_says() -> None:
    assert config_file({"XDG_CONFIG_HOME": "/x"}) == Path("/x/herd/cli.yaml")
    assert config_file({"XDG_CONFIG_HOME": "rel"}) == Path.home() / ".config/herd/cli.yaml"
    assert config_file({}) == Path.home() / ".config/herd/cli.yaml"
    assert config_file({"HERD_CLI_CONFIG": "/y/c.yaml", "XDG_CONFIG_HOME": "/x"}) == Path(
        "/y/c.yaml")


def test_a_saved_file_loads_back_owner_only_and_a_bad_one_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "herd" / "cli.yaml"
    assert load(path) == CliConfig()          # no file: no contexts
    config = CliConfig(current="a", contexts={"a": CliContext(server=CLOSED, output="json")})
    save(path, config)
    assert load(path) == config and path.stat().st_mode & 0o777 == 0o600
    path.write_text("contexts: {a: {sever: x}}\n")
    with pytest.raises(ContextError, match="unknown field `sever`"):
        load(path)
    path.write_text("contexts: [\n")
    with pytest.raises(ContextError) as bad:
        load(path)
    assert str(bad.value).startswith(f"{path}: ") and "\n" not in str(bad.value)


def test_an_unknown_context_is_refused_not_ignored(tmp_path: Path) -> None:
    config = CliConfig(current="gone", contexts={"a": CliContext(), "b": CliContext()})
    assert pick(config, "a", tmp_path) == ("a", CliContext())
    with pytest.raises(ContextError, match=r"no context 'x' in .* \(there are: a, b;"):
        pick(config, "x", tmp_path)
    with pytest.raises(ContextError, match="no the current context 'gone'|current context"):
        pick(config, None, tmp_path)
    assert pick(CliConfig(), None, tmp_path) is None


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str | None]:
    """A file with two contexts, ``lab`` current; no HERD_* variable set."""
    path = tmp_path / "cli.yaml"
    save(path, CliConfig(current="lab", contexts={
        "lab": CliContext(server="nats://127.0.0.1:99992", output="json"),
        "prod": CliContext(server="nats://127.0.0.1:99993")}))
    return {"HERD_CLI_CONFIG": str(path), "HERD_SERVER": None, "HERD_CREDS": None,
            "HERD_CONTEXT": None}


def server_of(args: list[str], env: dict[str, str | None]) -> str:
    """The port `herd ... status` would have connected to, from its one-line refusal
    (ports over 65535: refused before connecting); 4222: the default, which it tried."""
    result = CliRunner().invoke(app, [*args, "status"], env=env)
    if result.exit_code == 3:
        assert "127.0.0.1:4222" in result.output, result.output
        return "4222"
    assert result.exit_code == 2, result.output
    return result.output.split("'")[1].rsplit(":", 1)[1]


def test_flag_then_environment_then_context_then_default(env: dict[str, str | None]) -> None:
    assert server_of([], env) == "99992"                              # the current context
    assert server_of(["--context", "prod"], env) == "99993"
    assert server_of([], {**env, "HERD_CONTEXT": "prod"}) == "99993"
    assert server_of([], {**env, "HERD_SERVER": "nats://127.0.0.1:99994"}) == "99994"
    assert server_of(["-s", "nats://127.0.0.1:99995"],
                     {**env, "HERD_SERVER": "nats://127.0.0.1:99996"}) == "99995"


def test_an_unknown_context_or_bad_file_is_one_line_exit_2(env: dict[str, str | None],
                                                           tmp_path: Path) -> None:
    for args, environ in ((["--context", "nope"], env), ([], {**env, "HERD_CONTEXT": "nope"})):
        result = CliRunner().invoke(app, [*args, "status"], env=environ)
        assert result.exit_code == 2
        [line] = result.output.strip().splitlines()
        assert line.startswith("Error: no context 'nope' in "), line
    bad = tmp_path / "bad.yaml"
    bad.write_text("current: 1: 2\n")
    result = CliRunner().invoke(app, ["status"], env={**env, "HERD_CLI_CONFIG": str(bad)})
    assert result.exit_code == 2 and result.output.startswith(f"Error: {bad}: ")


def test_the_context_s_output_is_every_command_s_default(env: dict[str, str | None]) -> None:
    policy = str(EXAMPLES / "policy-herdbook.yaml")
    args = ["health", "test-policy", policy, "-e", '{"kind": "xid", "gpu": 0, "xid": 79}']
    assert json.loads(CliRunner().invoke(app, args, env=env).output)["verdict"] == "fatal"
    shown = CliRunner().invoke(app, [*args, "-o", "yaml"], env=env).output   # the flag wins
    assert shown.startswith("verdict: fatal\n")
    plain = CliRunner().invoke(app, ["--context", "prod", *args], env=env).output
    assert plain.startswith("verdict: fatal\nevents:")                     # table


def test_herd_node_list_s_own_parser_takes_the_context(env: dict[str, str | None],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    found = entry.parse_node_list(["--context", "prod", "node", "list"])
    assert found is not None and found["context"] == "prod"
    assert entry._connect_as(found) == ("nats://127.0.0.1:99993", "table")
    assert entry._connect_as({}) == ("nats://127.0.0.1:99992", "json")
    assert entry._connect_as({"output": "csv", "server": CLOSED}) == (CLOSED, "csv")
    monkeypatch.setenv("HERD_CONTEXT", "nope")
    with pytest.raises(entry.TyperSays):     # the typer app prints the one line
        entry._connect_as({})


def test_herd_context_set_use_show_list_delete(env: dict[str, str | None],
                                               tmp_path: Path) -> None:
    env = {**env, "HERD_CLI_CONFIG": str(tmp_path / "new" / "cli.yaml")}
    creds = tmp_path / "op.creds"
    creds.write_text("x")

    def herd(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(app, ["context", *args], env=env)
        return result.exit_code, result.output

    assert herd("set", "a", "--server", CLOSED)[0] == 0
    assert herd("set", "b", "--server", "nats://127.0.0.1:2", "--creds", str(creds),
                "-o", "yaml")[0] == 0
    assert load(Path(str(env["HERD_CLI_CONFIG"]))) == CliConfig(current="a", contexts={
        "a": CliContext(server=CLOSED),
        "b": CliContext(server="nats://127.0.0.1:2", creds=str(creds), output="yaml")})
    assert herd("use", "b") == (0, f"Ok: the current context is b ({env['HERD_CLI_CONFIG']})\n")
    code, shown = herd("show", "-o", "json")
    assert code == 0 and json.loads(shown)["name"] == "b" and json.loads(shown)["current"]
    code, listed = herd("list")
    assert [line.split()[:2] for line in listed.splitlines()[1:]] == [["a", CLOSED], ["*", "b"]]
    assert herd("set", "b", "--server", "")[0] == 0                      # '' unsets
    assert load(Path(str(env["HERD_CLI_CONFIG"]))).contexts["b"].server is None
    for bad in (("use", "zz"), ("show", "zz"), ("set", "a b"), ("set", "c", "-s", "x y"),
                ("set", "c", "--creds", str(tmp_path / "missing")), ("delete", "zz")):
        code, said = herd(*bad)
        assert code == 2 and len(said.strip().splitlines()) == 1 and said.startswith("Error:")
    assert herd("delete", "b")[0] == 0
    assert load(Path(str(env["HERD_CLI_CONFIG"]))) == CliConfig(contexts={
        "a": CliContext(server=CLOSED)})


def test_the_server_carries_its_credentials_through_str() -> None:
    """Commands hand ``str(ctx.obj["server"])`` on: the credentials go with it, held by
    the invocation, not by a module global of client.py."""
    auth = NatsAuth(user="op", password="pw")
    server = client.Server(CLOSED, auth)
    assert str(server) is server and server.auth is auth and server == CLOSED
    assert not hasattr(client, "set_auth") and not hasattr(client, "_auth")
    assert client.api_subject("status", "op-x") == "herd.api.v1.status.op-x"
    assert client.api_subject("status") == "herd.api.v1.status"


def test_in_use_reads_the_environment_s_file(env: dict[str, str | None]) -> None:
    environ = {k: v for k, v in env.items() if v is not None}
    assert in_use(environ).server == "nats://127.0.0.1:99992"
    assert in_use(environ, "prod").server == "nats://127.0.0.1:99993"
    assert in_use({**environ, "HERD_CONTEXT": "prod"}).server == "nats://127.0.0.1:99993"
