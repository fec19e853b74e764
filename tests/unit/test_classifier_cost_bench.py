"""benchmarks.classifier_cost at a tiny size, so it cannot rot: the classifier's CPU per
health report printed beside its limit (the same reports only decoded) and the heartbeat
intake's CPU per heartbeat of the same run, the fleet-wide shares, the decision, and the
command that reproduces it. It runs in this process (no server, no subprocess): the
figures themselves are measured by hand (docs/performance.md, docs/scale.md)."""

from __future__ import annotations

import re

import pytest

from benchmarks.classifier_cost import main


async def test_classifier_cost_prints_its_figure_beside_its_limit_and_the_decision(
        capsys: pytest.CaptureFixture[str]) -> None:
    await main([40, 120], 1, 0.1)
    out = capsys.readouterr().out
    for nodes in ("40", "120"):
        assert re.search(rf"^{nodes} nodes: classifier [\d.]+ µs CPU per health report; "
                         r"limit, the same reports only decoded \(msgspec\) [\d.]+ µs: ratio "
                         r"[\d.]+; heartbeat intake [\d.]+ µs CPU per heartbeat; [1-9]\d* "
                         r"health changes appended$", out, re.M), out
    assert re.search(r"^fleet at 120 nodes: classifier 2 reports/s x [\d.]+ µs = [\d.]+ CPU "
                     r"s/s; heartbeat intake 12/s x [\d.]+ µs = [\d.]+ CPU s/s; classifier "
                     r"share [\d.]+ of the heartbeat intake's \(limit 0.25\)$", out, re.M), out
    assert re.search(r"^decision: the classifier (stays on the leader|shards by node)", out,
                     re.M), out
    assert re.search(r"^health classifier CPU per report: [\d.]+ µs at 120 nodes against "
                     r"[\d.]+ µs decode-only \(limit; ratio [\d.]+\)", out, re.M), out
    assert ("reproduce: python -m benchmarks.classifier_cost --sizes 40,120 --rounds 1 "
            "--faulty 0.1") in out, out
