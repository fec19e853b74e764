"""No traceback for bad input, anywhere: every command, given a bad value, prints exactly
one line on stderr and exits 2 (usage), or 1 (refused) / 3 (unreachable) where the CLI's
exit codes say so, and nothing starts.

Walked through typer's CliRunner: the root group's one-line errors and the path checks
run in-process the same as in `herd`; tests/e2e/test_bad_input_processes.py runs a few
through real processes."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from herdbook.cli.main import app

CLOSED = "nats://127.0.0.1:1"
"""A server nobody listens on: a value not checked locally fails with 3, not a hang."""

BAD_INPUT: list[tuple[str, int]] = [
    # global options
    ("--server nats://127.0.0.1:99999 status", 2),
    ("--server bogus:// status", 2),
    ("--server nats:// node list", 2),
    ("--server 'nats://[::1' node list", 2),    # urlparse's own ValueError: was a traceback
    ("-s 'not a url' node list", 2),            # was exit 3 after a 3 s connect
    ("-s 'nats://a b:4222' status", 2),
    ("--creds {missing} status", 2),
    ("--creds {dir} status", 2),
    ("--tls-ca {missing} status", 2),
    ("--bogus status", 2),
    ("nodee", 2),
    # herd up
    ("up --nats-port 99999", 2),
    ("up --nats-port 0", 2),
    ("up --nats-port -1", 2),
    ("up --nats-port abc", 2),
    ("up --metrics-port 70000", 2),
    ("up --demo -1", 2),
    ("up --data-dir {file}", 2),
    ("up --data-dir {under_file}", 2),
    ("up --data-dir {seq_dir}", 2),
    ("up --config {missing}", 2),
    ("up --config {dir}", 2),
    ("up --config {malformed}", 2),
    ("up --config {unknown_key}", 2),
    ("up --config {bad_duration}", 2),
    ("up --config {bad_port}", 2),
    ("up --config {negative_timeout}", 2),
    ("up --node-id 'a b'", 2),
    ("up --log-level loud", 2),
    ("up --nats-url nats://127.0.0.1:99999", 2),
    ("up --nats-url 'nats://[::1'", 2),
    ("up --nats-url nats://127.0.0.1:1 --creds {missing}", 2),
    # herd agent
    ("agent --state-dir {file}", 2),
    ("agent --state-dir {under_file}", 2),
    ("agent --state-dir {seq_dir}", 2),
    ("agent --state-dir {sentinel_dir}", 2),
    ("agent --state-file {dir}", 2),
    ("agent --state-file {under_file}", 2),
    ("agent --heartbeat-interval 0", 2),
    ("agent --heartbeat-interval -1", 2),
    ("agent --info-interval 0", 2),
    ("agent --resource-interval 0", 2),
    ("agent --health-interval 0", 2),
    ("agent --boot-retry-interval -1", 2),
    ("agent --fingerprint-interval soon", 2),
    ("agent --fingerprint-interval 0s", 2),
    ("agent --telemetry-interval 0", 2),
    ("agent --telemetry-interval never", 2),
    ("agent --throttle-window 0", 2),
    ("agent --expected-gpus -1", 2),
    ("agent --node-id 'a b'", 2),
    ("agent --instance-id 'a b'", 2),
    ("agent --class gold", 2),
    ("agent --labels novalue", 2),
    ("agent --fake-gpus -1", 2),
    ("agent --wipe-config {missing}", 2),
    ("agent --wipe-config {dir}", 2),
    ("agent --log-level loud", 2),
    ("agent --server nats://127.0.0.1:99999", 2),
    ("agent --server 'nats://[::1'", 2),
    ("agent --creds {missing}", 2),
    ("agent inject xid", 2),
    ("agent inject melt --node n1", 2),
    ("agent sample --fake-gpus -1", 2),
    ("agent sample --fake-gpus 2 --node-id 'a b'", 2),
    ("agent inject xid --node n1", 2),
    ("agent inject xid 79 --node 'a b'", 2),
    ("agent inject xid 79 --node n1 --gpu -1", 2),
    # node
    ("node list --filter-state sleepy", 2),
    ("node list --filter-approval maybe", 2),
    ("node list --order-by color", 2),
    ("node list --labels novalue", 2),
    ("node list --at yesterday", 2),
    ("node list -o xml", 2),
    ("node describe 'a b'", 2),
    ("node describe n1 --at soon", 2),
    ("node history 'a b'", 2),
    ("node history n1 --limit 0", 2),
    *[(f"node {verb} 'a b'", 2) for verb in (
        "approve", "reject", "delete", "add", "cordon", "uncordon", "undrain", "disable",
        "enable", "reboot", "status", "release", "fingerprint", "validate")],
    ("node validate", 2),
    ("node approve", 2),
    ("node add n1 --class gold", 2),
    ("node add n1 --labels =x", 2),
    ("node drain 'a b'", 2),
    ("node drain n1 --deadline soon", 2),
    ("node claim 'a b' --user u", 2),
    ("node claim n1", 2),
    ("node conformance -o xml", 2),
    # gpu
    ("gpu list --health sleepy", 2),
    ("gpu list -o xml", 2),
    ("gpu list -l novalue", 2),
    ("gpu list --node 'a b'", 2),
    ("gpu describe n1", 2),
    ("gpu describe 'a b/1'", 2),
    ("gpu describe n1/x", 2),
    # events, view, top, status
    ("events tail --since 0", 2),
    ("events tail --since -5", 2),
    ("events tail -o xml", 2),
    ("events schema --bogus", 2),
    ("view rebuild --bogus", 2),
    ("top --interval 0", 2),
    ("status -o xml", 2),
    ("version --bogus", 2),
    # fleet, jobs, audit, admin
    ("instance list -o xml", 2),
    ("instance describe 'a b'", 2),
    ("pool list -o xml", 2),
    ("pool status 'a b'", 2),
    ("pool scale p -1", 2),
    ("pool scale p many", 2),
    ("fleet repairs --since yesterday", 2),
    ("fleet repairs --limit 0", 2),
    ("fleet repairs --node 'a b'", 2),
    ("fleet repairs -o xml", 2),
    ("breaker status -o xml", 2),
    ("breaker reset", 2),
    ("breaker reset --reason ' '", 2),
    ("breaker reset --reason ok --scope rack:7", 2),
    ("breaker reset --reason ok --scope 'pool:a b'", 2),
    ("job list --status sideways", 2),
    ("job run {missing}", 2),
    ("job run {dir}", 2),
    ("job run {malformed}", 2),
    ("job plan {missing}", 2),
    ("job plan {malformed}", 2),
    ("job status 'a b'", 2),
    ("job stop 'a b'", 2),
    ("eval list --status sideways", 2),
    ("eval status 'a b'", 2),
    ("eval retry 'a b'", 2),
    ("eval describe 'a b'", 2),
    ("alloc list --status sideways", 2),
    ("alloc list --node 'a b'", 2),
    ("alloc status 'a b'", 2),
    ("alloc requeue 'a b'", 2),
    ("alloc logs 'a b'", 2),
    ("alloc logs a1 --tail -1", 2),
    ("audit list --since yesterday", 2),
    ("audit list --limit 0", 2),
    ("audit list --node 'a b'", 2),
    ("audit verify --node 'a b'", 2),
    ("admin node wipe 'a b' --force --yes", 2),
    ("admin node wipe n1", 2),
    ("health check-policy {missing}", 2),
    ("health check-policy {dir}", 2),
    ("health check-policy {malformed}", 1),     # read, and refused: what the command checks
    ("health test-policy {missing} -e '{{\"kind\": \"xid\"}}'", 2),
    ("health test-policy {malformed} -e '{{\"kind\": \"xid\"}}'", 1),
    ("health test-policy {malformed} -e '{{\"kind\": \"xid\"'", 2),      # not JSON
    ("health test-policy {malformed} -e '{{\"gpu\": 0}}'", 2),            # no kind
    ("health test-policy {malformed} -e '{{\"kind\": \"xid\", \"temp\": 1}}'", 2),
    # contexts (cli/contexts.py)
    ("--context nope status", 2),
    ("context use nope", 2),
    ("context show nope", 2),
    ("context delete nope", 2),
    ("context list -o sideways", 2),
    ("context set 'a b'", 2),
    ("context set c -s 'x y'", 2),
    ("context set c --creds {missing}", 2),
    # sim
    ("sim", 2),
    ("sim {missing}", 2),
    ("sim {dir}", 2),
    ("sim {malformed}", 2),
    ("sim --chaos --nodes 0", 2),
    ("sim --chaos --rate -1", 2),
    ("sim --chaos --duration soon", 2),
    ("sim --chaos --mix meteor=1", 2),
    ("sim --chaos --heartbeat-interval 0s", 2),
    ("sim --replicas 2 --nodes 10", 2),                  # lightweight nodes only
    ("sim --replicas 2 --lightweight --liveness-shards 1", 2),   # fewer shards than replicas
    ("sim --replicas 9 --lightweight", 2),
    ("sim --chaos --heartbeat-timeout soon", 2),
    ("sim --chaos --data-dir {file}", 2),
    ("sim --chaos --data-dir {under_file}", 2),
    ("sim --chaos --report {dir}", 2),
    ("sim --chaos --report {under_missing}", 2),
    ("sim --chaos --log-level loud", 2),
    # nats cluster, creds
    ("nats cluster --dir {file}", 2),
    ("nats cluster --dir {under_file}", 2),
    ("nats cluster --size 0", 2),
    ("nats cluster --base-port 0", 2),
    ("nats cluster --base-port 99999", 2),
    ("nats config --out {dir}", 2),
    ("nats config --auth --cluster-routes 2 --out {dir}", 2),
    ("creds agent 'a b' --data-dir {dir}", 2),
    ("creds agent n1 --data-dir {file}", 2),
    ("creds agent n1 --data-dir {under_file}", 2),
    ("creds agent n1 --config {malformed}", 2),
    ("creds operator --name 'a b' --data-dir {dir}", 2),
    ("creds operator --data-dir {dir} --out {dir}", 2),
    ("creds list --data-dir {file}", 2),
    ("creds list --config {missing}", 2),
    ("creds revoke op-x --data-dir {file}", 2),
    # the control plane unreachable is 3, in one line too
    ("status", 3),
    ("node approve n1", 3),
]


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "file").write_text("x\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "seq" / "heartbeat-seq").mkdir(parents=True)
    (tmp_path / "sentinel" / "registered.json").mkdir(parents=True)
    configs = {"malformed": "nats: [\n", "unknown_key": "colour: blue\n",
               "bad_duration": "lifecycle: {heartbeat_timeout: 5 parsecs}\n",
               "bad_port": "nats: {port: 99999}\n",
               "negative_timeout": "lifecycle: {heartbeat_timeout: -5s}\n"}
    for name, text in configs.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    return {"file": str(tmp_path / "file"), "dir": str(tmp_path / "dir"),
            "missing": str(tmp_path / "missing"),
            "under_file": str(tmp_path / "file" / "sub"),
            "under_missing": str(tmp_path / "missing" / "report.json"),
            "seq_dir": str(tmp_path / "seq"), "sentinel_dir": str(tmp_path / "sentinel"),
            **{name: str(tmp_path / f"{name}.yaml") for name in configs}}


def invoke(line: str, paths: dict[str, str]) -> object:
    import shlex
    args = shlex.split(line.format(**paths))
    if not args[0].startswith("--"):
        args = ["--server", CLOSED, *args]
    return CliRunner().invoke(app, args, env={"HERD_SERVER": None, "HERD_CREDS": None})


@pytest.mark.parametrize(("line", "code"), BAD_INPUT, ids=[line for line, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_its_exit_code(line: str, code: int, paths: dict[str, str],
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)    # defaults like ./.herd-agent would land here
    result = invoke(line, paths)
    stderr = result.stderr  # type: ignore[attr-defined]
    output = result.output  # type: ignore[attr-defined]
    assert result.exception is None or isinstance(result.exception, SystemExit), (  # type: ignore[attr-defined]
        f"{line}: raised {result.exception!r}")  # type: ignore[attr-defined]
    assert "Traceback" not in output and "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), (line, stderr)
    assert result.exit_code == code, (line, result.exit_code, stderr)  # type: ignore[attr-defined]
    assert not (tmp_path / ".herd").exists() and not (tmp_path / ".herd-agent").exists()


def commands(group: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    subs = getattr(group, "commands", {})
    if not subs or getattr(group, "invoke_without_command", False):
        found.append(path)
    for name, sub in subs.items():
        found += commands(sub, (*path, name))
    return found


def test_every_command_has_a_row() -> None:
    """A command added later gets its bad values into the table above."""
    covered = {tuple(line.replace("--server nats://127.0.0.1:99999 ", "").split()[:3])
               for line, _ in BAD_INPUT}
    missing = [" ".join(cmd) for cmd in commands(typer.main.get_command(app))
               if cmd and not any(c[:len(cmd)] == cmd for c in covered)]
    assert missing == []
