"""The Slurm notifier: node names, the scontrol command lines, Slurm's DRAINED. The
notifier around them with a stand-in scontrol script (a process) is
tests/integration/test_slurm_stand_in.py; the real scontrol, tests/integration/test_slurm.py."""

from __future__ import annotations

import pytest

from herdbook.config import ConfigError, parse_config
from herdbook.reactors.slurm import (
    SlurmError,
    clean_reason,
    drain_reason,
    draining_flag,
    is_drained,
    node_name,
    node_state,
    update_argv,
)


def test_node_names_from_the_template() -> None:
    labels = {"slurm-node": "cn042", "rack": "r7"}
    assert node_name("{node_id}", "gpu-1", {}) == "gpu-1"
    assert node_name("slurm-{node_id}", "gpu-1", {}) == "slurm-gpu-1"
    assert node_name("{label:slurm-node}", "gpu-1", labels) == "cn042"
    assert node_name("{label:rack}-{node_id}", "gpu-1", labels) == "r7-gpu-1"
    with pytest.raises(SlurmError, match="node gpu-1 has no label 'slurm-node'"):
        node_name("{label:slurm-node}", "gpu-1", {})


@pytest.mark.parametrize("name", ["gpu-[1-64]", "a,b", "a b", "NodeName=x", ""])
def test_a_name_that_slurm_would_read_as_several_nodes_is_refused(name: str) -> None:
    with pytest.raises(SlurmError, match="is not one Slurm node name"):
        node_name("{label:n}", "gpu-1", {"n": name})


def test_the_template_is_checked_when_the_config_loads() -> None:
    assert parse_config("notifier: {type: slurm, slurm: {node_name: 'gpu-{label:k}'}}")
    with pytest.raises(ConfigError, match="notifier.slurm.node_name: only {node_id} and"):
        parse_config("notifier: {type: slurm, slurm: {node_name: '{hostname}'}}")


def test_drain_and_resume_command_lines_carry_the_reason_as_one_argument() -> None:
    assert update_argv("scontrol", "drain", "cn1", "XID 79; rm -rf /") == [
        "scontrol", "update", "NodeName=cn1", "State=DRAIN", "Reason=herdbook: XID 79; rm -rf /"]
    assert update_argv("/opt/slurm/bin/scontrol", "cordon", "cn1", "")[-1] == (
        "Reason=herdbook: cordon")
    assert update_argv("scontrol", "uncordon", "cn1", "ok") == [
        "scontrol", "update", "NodeName=cn1", "State=RESUME"]
    assert update_argv("scontrol", "undrain", "cn1", "")[-1] == "State=RESUME"


def test_the_reason_is_one_printable_line_of_at_most_200_characters() -> None:
    assert clean_reason("drain", "fan\nnoise\t\x1b[31m  loud") == "herdbook: fan noise [31m loud"
    assert len(clean_reason("drain", "x" * 1000)) == 200


# What `scontrol -o show node` prints (22.05), trimmed to the State field around it.
@pytest.mark.parametrize(("state", "drained"), [
    ("IDLE+DRAIN", True),
    ("DOWN+DRAIN", True),
    ("DOWN+DRAIN+NOT_RESPONDING", True),
    ("IDLE*+DRAIN", True),
    ("ALLOCATED+DRAIN", False),
    ("MIXED+DRAIN", False),
    ("IDLE+COMPLETING+DRAIN", False),
    ("IDLE", False),
    ("DOWN+NOT_RESPONDING", False),
    ("ALLOCATED", False),
])
def test_drained_is_slurms_drained(state: str, drained: bool) -> None:
    line = f"NodeName=cn1 Arch=x86_64 CPUTot=1 State={state} ThreadsPerCore=1 Reason=x [root@t]"
    assert node_state(line) == state
    assert is_drained(state) is drained
    assert draining_flag(state) is ("+DRAIN" in state)
    assert drain_reason(line) == "x"


def test_an_answer_without_a_state_is_an_error() -> None:
    with pytest.raises(SlurmError, match="no State="):
        node_state("Node cn9 not found")
