"""Interval and duration flags read durations the way the config does (issue 16, item 4):
``500ms``, ``2s``, ``1m``; a plain number is seconds; a bad value is one line, exit 2."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
import typer
from typer.testing import CliRunner

from herdbook.cli.duration_flags import duration_option, duration_parser
from herdbook.cli.main import app
from herdbook.durations import format_duration, parse_duration
from herdbook.events.liveness_settings import derived_interval, interval_warning


def probe_app() -> typer.Typer:
    """A command with one duration flag, under the root group's one-line errors."""
    from herdbook.cli.usage import OneLineErrors
    probe = typer.Typer(cls=OneLineErrors)

    @probe.callback()
    def root() -> None:
        """Root."""

    @probe.command("wait")
    def wait(every: Annotated[float, duration_option("--every", help="How often.",
                                                     default="2s", minimum=0.1)] = 2.0,
             ) -> None:
        print(repr(every))

    return probe


@pytest.mark.parametrize(("text", "seconds"), [
    ("500ms", 0.5), ("2s", 2.0), ("1m", 60.0), ("1.5h", 5400.0), ("7", 7.0), ("0.25", 0.25),
])
def test_a_duration_flag_reads_what_the_config_reads(text: str, seconds: float) -> None:
    result = CliRunner().invoke(probe_app(), ["wait", "--every", text])
    assert result.exit_code == 0, result.output
    assert float(result.stdout.strip()) == seconds == float(parse_duration(text))


def test_the_default_is_seconds_and_the_help_names_durations() -> None:
    runner = CliRunner()
    assert runner.invoke(probe_app(), ["wait"]).stdout.strip() == "2.0"
    shown = runner.invoke(probe_app(), ["wait", "--help"], env={"COLUMNS": "200"}).stdout
    assert "DURATION" in shown and "(default: 2s)" in shown


@pytest.mark.parametrize("text", ["soon", "-1", "5x", "", "50ms"])
def test_a_bad_duration_is_one_line_and_exit_2(text: str) -> None:
    result = CliRunner().invoke(probe_app(), ["wait", "--every", text])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "--every" in lines[0]
    assert "Traceback" not in result.output


def test_the_parser_refuses_below_its_minimum_and_zero_when_positive() -> None:
    with pytest.raises(typer.BadParameter, match="at least 50ms"):
        duration_parser(0.05)("10ms")
    with pytest.raises(typer.BadParameter, match="more than 0s"):
        duration_parser(positive=True)("0s")
    assert duration_parser(positive=True)("1m") == 60.0


AGENT_FLAGS = ["--heartbeat-interval", "--info-interval", "--resource-interval",
               "--boot-retry-interval", "--health-interval", "--fingerprint-interval"]


@pytest.mark.parametrize("flag", AGENT_FLAGS)
def test_every_agent_interval_takes_durations(flag: str, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Any) -> None:
    """The agent command gets as far as running the agent with the value in seconds."""
    import herdbook.agent.main as agent_main
    seen: dict[str, Any] = {}

    async def fake_run(options: Any) -> None:
        seen["options"] = options

    monkeypatch.setattr(agent_main, "run_agent", fake_run)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["agent", "--fake-gpus", "1", flag, "1.5m"],
                                env={"HERD_SERVER": None})
    assert result.exit_code == 0, result.output
    field = flag.removeprefix("--").replace("-", "_")
    assert getattr(seen["options"], field) == 90.0
    bad = CliRunner().invoke(app, ["agent", flag, "often"], env={"HERD_SERVER": None})
    assert bad.exit_code == 2 and len(bad.stderr.splitlines()) == 1
    assert flag in bad.stderr and "Traceback" not in bad.output


def test_the_agent_heartbeat_interval_defaults_to_the_published_one(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import herdbook.agent.main as agent_main
    seen: dict[str, Any] = {}

    async def fake_run(options: Any) -> None:
        seen["options"] = options

    monkeypatch.setattr(agent_main, "run_agent", fake_run)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["agent", "--fake-gpus", "1"], env={"HERD_SERVER": None})
    assert result.exit_code == 0, result.output
    assert seen["options"].heartbeat_interval is None     # derived by the agent


@pytest.mark.parametrize(("args", "flag"), [
    (["top", "--interval", "5x"], "--interval"),
    (["top", "--interval", "100ms"], "--interval"),
    (["sim", "--chaos", "--duration", "forever"], "--duration"),
    (["sim", "--chaos", "--heartbeat-timeout", "0"], "--heartbeat-timeout"),
])
def test_other_commands_refuse_a_bad_duration_in_one_line(args: list[str], flag: str) -> None:
    result = CliRunner().invoke(app, ["--server", "nats://127.0.0.1:1", *args],
                                env={"HERD_SERVER": None})
    assert result.exit_code == 2, result.output
    assert len(result.stderr.splitlines()) == 1 and flag in result.stderr


@pytest.mark.parametrize(("seconds", "text"), [
    (0.5, "500ms"), (10.0, "10s"), (90.0, "1.5m"), (120.0, "2m"), (6 * 3600.0, "6h"),
    (10 / 3, "3.333s"),
])
def test_durations_print_as_they_are_written(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert abs(float(parse_duration(text)) - seconds) < 0.001


def test_the_interval_rule() -> None:
    """Two intervals must fit in the timeout: one lost heartbeat keeps the node READY."""
    assert derived_interval(30.0) == 10.0
    assert interval_warning(10.0, 30.0) is None
    assert interval_warning(14.9, 30.0) is None
    half = interval_warning(15.0, 30.0)
    assert half is not None and "no margin" in half and "10s" in half
    over = interval_warning(30.0, 30.0)
    assert over is not None and "not shorter than the heartbeat timeout 30s" in over
    assert "\n" not in over


def test_off_is_none_where_a_flag_allows_it_and_refused_elsewhere() -> None:
    assert duration_parser(0.05, off=True)("off") is None
    assert duration_parser(0.05, off=True)(" OFF ") is None
    assert duration_parser(0.05, off=True)("15s") == 15.0
    with pytest.raises(typer.BadParameter, match="invalid duration 'off'"):
        duration_parser(0.05)("off")
