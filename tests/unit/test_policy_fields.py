"""A policy rule that names a field no event has compiles (CEL checks no types) and then
never matches: `herd health check-policy`, and `herd up` loading it, refuse it in one
line naming the field and the known ones. `herd health test-policy` shows the verdict a
sample report gets from the classifier's own code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from herdbook.cli.main import app
from herdbook.events.health_report import CheckResult, GpuEvent
from herdbook.health.policy import Policy, PolicyError
from herdbook.health.policy_fields import known_fields, references, unknown_field
from herdbook.reactors.policy_trial import SampleError, health_effect, report_of, sample_item, trial

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def policy_yaml(condition: str, version: str = "1") -> str:
    return (f"version: {version}\nrules:\n  - name: hot\n    condition: '{condition}'\n"
            "    result: critical\n")


def test_references_are_read_from_the_tokens_not_from_strings() -> None:
    assert references('event.kind == "xid" && event["gpu"] == 0') == [("kind",), ("gpu",)]
    assert references("has(event.metrics.temperature) && event.metrics['xid_code'] > 1") == [
        ("metrics", "temperature"), ("metrics", "xid_code")]
    assert references('"event.temp" == event.message') == [("message",)]
    assert references("r'''event.temp''' == a.event.temp") == []


def test_the_known_fields_are_what_the_classifier_hands_a_rule() -> None:
    fields, keys = known_fields(checks=True)
    assert {"kind", "gpu", "xid", "value", "fatal", "event_type", "gpu_index", "metrics",
            "status", "name"} <= fields
    assert "status" not in known_fields(checks=False)[0]    # Navarch's rules see no checks
    assert {"temperature", "xid_code", "ecc_dbe_count"} <= keys


@pytest.mark.parametrize(("condition", "named"), [
    ("event.temp >= 80", "event.temp"),
    ("event.kind == \"thermal\" && event.metrics.temp > 80", "event.metrics.temp"),
    ("has(event.gpu_temp)", "event.gpu_temp"),
])
def test_a_rule_naming_an_unknown_field_is_refused(condition: str, named: str) -> None:
    why = unknown_field(condition, checks=True)
    assert why is not None and why.startswith(f"{named} is not a")
    with pytest.raises(PolicyError) as refused:
        Policy.parse(policy_yaml(condition), "p.yaml")
    message = str(refused.value)
    assert message.startswith(f"p.yaml: rule 'hot': {named} is not a") and "\n" not in message
    assert "kind" in message or "temperature" in message       # the known ones are listed


def test_a_check_field_is_unknown_to_a_navarch_policy_only() -> None:
    Policy.parse(policy_yaml('event.status == "unhealthy"'))
    with pytest.raises(PolicyError, match=r"event\.status is not a field"):
        Policy.parse(policy_yaml('event.status == "unhealthy"', "v1"))


def test_the_shipped_and_default_policies_pass() -> None:
    Policy.load(None)
    for example in ("policy-herdbook.yaml", "policy-navarch.yaml"):
        Policy.load(EXAMPLES / example)


def test_check_policy_refuses_it_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text(policy_yaml("event.temp >= 80"))
    result = CliRunner().invoke(app, ["health", "check-policy", str(bad)])
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert line.startswith(f"Error: {bad}: rule 'hot': event.temp is not a field"), line


def test_sample_events_are_decoded_strictly() -> None:
    assert sample_item('{"kind": "xid", "gpu": 0, "xid": 79}') == GpuEvent(kind="xid", gpu=0,
                                                                           xid=79)
    assert sample_item('{"kind": "check", "name": "gpu", "status": "degraded"}') == (
        CheckResult(name="gpu", status="degraded"))
    for text, why in [('{"kind": "xid"', "not JSON"), ("[1]", "a JSON object"),
                      ('{"gpu": 0}', "missing required field `kind`"),
                      ('{"kind": "heat"}', "Invalid enum value 'heat'"),
                      ('{"kind": "thermal", "temp": 90}', "'temp': not a field"),
                      ('{"kind": "check", "name": "gpu"}', "missing required field `status`"),
                      ('{"kind": "check", "name": "gpu", "status": "meh"}', "'meh'")]:
        with pytest.raises(SampleError, match=why):
            sample_item(text)


def test_the_verdict_is_the_classifiers() -> None:
    policy = Policy.load(EXAMPLES / "policy-herdbook.yaml")
    shown = trial(policy, [GpuEvent(kind="xid", gpu=0, xid=79)], threshold=2)
    assert shown["verdict"] == "fatal" and shown["action"] == "reboot_node"
    assert shown["events"] == [{"event": "XID 79 on GPU 0", "rule": "gpu-lost",
                                "result": "fatal", "action": "reboot_node"}]
    assert shown["health"] == "UNHEALTHY (fatal) and DOWN at once"
    unhealthy = policy.classify(
        report_of([CheckResult(name="gpu", status="unhealthy")]))
    assert health_effect(unhealthy, 3) == (
        "UNHEALTHY after 3 such reports in a row (health.unhealthy_threshold: 3)")
    healthy = trial(policy, [GpuEvent(kind="xid", gpu=0, xid=1)], threshold=2)
    assert healthy["verdict"] == "healthy" and healthy["events"][0]["rule"] == "(none)"
    assert healthy["health"] == "HEALTHY: no change"


def test_test_policy_prints_the_verdict_and_refuses_a_bad_event_in_one_line() -> None:
    policy = str(EXAMPLES / "policy-navarch.yaml")
    run = CliRunner().invoke(app, ["health", "test-policy", policy, "-o", "json", "--event",
                                   '{"kind": "thermal", "gpu": 1, "value": 96}'])
    assert run.exit_code == 0, run.output
    shown = json.loads(run.output)
    assert (shown["verdict"], shown["events"][0]["rule"]) == ("critical", "thermal-critical")
    assert shown["health"] == "UNHEALTHY (critical) at once"
    for event in ('{"kind": "thermal"', '{"gpu": 1}'):
        bad = CliRunner().invoke(app, ["health", "test-policy", policy, "--event", event])
        assert bad.exit_code == 2
        [line] = bad.output.strip().splitlines()
        assert line.startswith("Error: --event"), line
