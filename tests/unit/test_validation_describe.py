"""`herd node describe` / NodeDetail carry the view's validation (status, due, trigger,
check, allocation, times, reason) and the describe table prints a hint line for a
VALIDATING node (docs/remediation.md#validation)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from herdbook.api.messages import NodeDetail
from herdbook.api.present import NodeJsonCache, node_detail, node_json
from herdbook.cli.output import Format, print_validation_hint, validation_hint
from herdbook.events.node import (
    GpuInfo,
    NodeApproved,
    NodeBootChecked,
    NodeInfo,
    NodeRegistered,
    NodeValidationFailed,
    NodeValidationStarted,
)
from herdbook.projector.node_fold import apply
from herdbook.projector.node_view import NodeView

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def fold(*events: Any) -> NodeView:
    view = None
    for seq, event in enumerate(events, 1):
        view = apply(view, event, seq)
    assert view is not None
    return view


START = NodeValidationStarted(node_id="g1", trigger="returned", check="dcgm-diag",
                              command=["dcgmi", "diag", "-r", "2"], timeout_s=600,
                              alloc_id="va1", reason="back from UNHEALTHY", at=T0)
BASE = (NodeRegistered(node_id="g1", boot_id="b1", info=NodeInfo(
            gpus=(GpuInfo(index=0, uuid="u", name="H100"),))),
        NodeApproved(node_id="g1"), NodeBootChecked(node_id="g1", boot_id="b1", passed=True))


def test_a_validating_node_in_detail() -> None:
    view = fold(*BASE, START)
    detail = msgspec.to_builtins(node_detail(view, None, 30.0, clock=None))
    assert detail["state"] == "VALIDATING" and detail["schedulable"] is False
    assert {k: v for k, v in detail.items() if k.startswith("validation")} == {
        "validation": "running", "validation_due": None, "validation_trigger": "returned",
        "validation_check": "dcgm-diag", "validation_alloc": "va1",
        "validation_started_at": "2026-03-01T12:00:00Z", "validation_at": None,
        "validation_reason": "back from UNHEALTHY"}
    # node.list -o wide's cached bytes are the same reply
    cached = NodeJsonCache().item(view, None, lambda v: 30.0, 0, 1e9, wide=True)
    assert msgspec.json.decode(cached) == node_json(view, None, 30.0, clock=None)
    msgspec.json.decode(cached, type=NodeDetail)


def test_a_failed_validation_in_detail() -> None:
    end = T0 + timedelta(minutes=4)
    view = fold(*BASE, START, NodeValidationFailed(
        node_id="g1", alloc_id="va1", check="dcgm-diag", trigger="returned", failures=1,
        reason="validation dcgm-diag exited 1: GPU 3 failed", at=end))
    detail = node_json(view, None, 30.0, clock=None)
    assert (detail["state"], detail["validation"], detail["validation_due"]) == (
        "UNHEALTHY", "failed", "returned")
    assert detail["validation_at"] == "2026-03-01T12:04:00Z"
    assert detail["validation_reason"] == "validation dcgm-diag exited 1: GPU 3 failed"
    assert validation_hint(detail) is None


def test_a_never_validated_node_says_none() -> None:
    detail = node_json(fold(*BASE), None, 30.0, clock=None)
    assert detail["validation"] is None and detail["validation_due"] == "approved"


def test_the_table_prints_a_hint_line_for_a_validating_node(
        capsys: pytest.CaptureFixture[str]) -> None:
    detail = node_json(fold(*BASE, START), None, 30.0, clock=None)
    assert validation_hint(detail) == (
        "validating: dcgm-diag (returned) runs as allocation va1 since "
        "2026-03-01T12:00:00Z; back in service when it passes (herd alloc status va1)")
    print_validation_hint(detail, Format.table)
    print_validation_hint(detail, Format.json)     # json carries the fields themselves
    assert capsys.readouterr().out == f"{validation_hint(detail)}\n"


def test_a_node_waiting_for_its_validation_says_so() -> None:
    from herdbook.config import ValidationConfig
    from herdbook.reactors.validation_deciders import waiting
    due = fold(*BASE)                       # approved, READY, due (approved)
    gate = ValidationConfig(name="dcgm-diag", command=["dcgmi", "diag", "-r", "2"])
    assert waiting(due, gate)
    assert not waiting(due, ValidationConfig())                         # no gate
    assert not waiting(due, ValidationConfig(command=["x"], when=["returned"]))
    assert not waiting(fold(*BASE, START), gate)                        # it runs
    detail = {**node_json(due, None, 30.0, clock=None), "validation_waiting": True}
    assert validation_hint(detail) == (
        "due for validation (approved): waits to start (validation.max_concurrent bounds "
        "the checks at once); the scheduler places nothing here until it is validated")
