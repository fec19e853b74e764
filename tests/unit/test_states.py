"""The one-word state (DESIGN §4): first match wins, schedulability, filter words."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from herdbook.events.states import (
    STATE_ALIASES,
    STATE_ORDER,
    Approval,
    Health,
    Intent,
    Lifecycle,
    derive_state,
    is_schedulable,
    resolve_state_filter,
)

L, H, IN = Lifecycle, Health, Intent

# DESIGN §4, in its order: the state shown is the first whose condition holds.
FIRST_MATCH: dict[str, Callable[[Lifecycle, Health, Intent, bool], bool]] = {
    "TERMINATED": lambda lc, hl, it, va: lc is L.TERMINATED,
    "QUARANTINED": lambda lc, hl, it, va: lc is L.QUARANTINED,
    "FAILED": lambda lc, hl, it, va: lc is L.FAILED,
    "DOWN": lambda lc, hl, it, va: lc is L.DOWN,
    "UNKNOWN": lambda lc, hl, it, va: lc is L.UNKNOWN,
    "BOOTING": lambda lc, hl, it, va: lc is L.BOOTING,
    "DEGRADED": lambda lc, hl, it, va: lc is L.DEGRADED,
    "UNHEALTHY": lambda lc, hl, it, va: hl is H.UNHEALTHY,
    "VALIDATING": lambda lc, hl, it, va: va,
    "DISABLED": lambda lc, hl, it, va: it is IN.DISABLED,
    "DRAINING": lambda lc, hl, it, va: it is IN.DRAINING,
    "DRAINED": lambda lc, hl, it, va: it is IN.DRAINED,
    "CORDONED": lambda lc, hl, it, va: it is IN.CORDONED,
    "READY": lambda lc, hl, it, va: True,
}

ALL_DIMENSIONS = list(itertools.product(Lifecycle, Health, Intent, (False, True)))


def test_state_order_is_the_design_order() -> None:
    assert STATE_ORDER == tuple(FIRST_MATCH)


@pytest.mark.parametrize(("lifecycle", "health", "intent", "validating"), ALL_DIMENSIONS,
                         ids=str)
def test_derive_state_is_the_first_match(lifecycle: Lifecycle, health: Health,
                                         intent: Intent, validating: bool) -> None:
    expected = next(s for s, holds in FIRST_MATCH.items()
                    if holds(lifecycle, health, intent, validating))
    assert derive_state(lifecycle, health, intent, validating) == expected


# A few rows spelled out, each with every later condition also true.
@pytest.mark.parametrize(("lifecycle", "health", "intent", "state"), [
    (L.TERMINATED, H.UNHEALTHY, IN.DISABLED, "TERMINATED"),
    (L.QUARANTINED, H.UNHEALTHY, IN.DRAINING, "QUARANTINED"),
    (L.FAILED, H.UNHEALTHY, IN.CORDONED, "FAILED"),
    (L.DOWN, H.UNHEALTHY, IN.DISABLED, "DOWN"),
    (L.UNKNOWN, H.UNHEALTHY, IN.DRAINED, "UNKNOWN"),
    (L.BOOTING, H.UNHEALTHY, IN.CORDONED, "BOOTING"),
    (L.DEGRADED, H.UNHEALTHY, IN.DISABLED, "DEGRADED"),
    (L.READY, H.UNHEALTHY, IN.DISABLED, "UNHEALTHY"),
    (L.READY, H.DEGRADED, IN.DISABLED, "DISABLED"),
    (L.READY, H.HEALTHY, IN.DRAINING, "DRAINING"),
    (L.READY, H.HEALTHY, IN.DRAINED, "DRAINED"),
    (L.READY, H.UNKNOWN, IN.CORDONED, "CORDONED"),
    (L.READY, H.HEALTHY, IN.ELIGIBLE, "READY"),
    (L.READY, H.DEGRADED, IN.ELIGIBLE, "READY"),
    (L.READY, H.UNKNOWN, IN.ELIGIBLE, "READY"),
])
def test_derive_state_rows(lifecycle: Lifecycle, health: Health, intent: Intent,
                           state: str) -> None:
    assert derive_state(lifecycle, health, intent) == state


def test_every_state_is_reachable() -> None:
    assert {derive_state(*dims) for dims in ALL_DIMENSIONS} == set(STATE_ORDER)


@pytest.mark.parametrize("health", [H.UNKNOWN, H.HEALTHY, H.DEGRADED])
def test_approved_ready_eligible_is_schedulable(health: Health) -> None:
    assert is_schedulable(Approval.APPROVED, L.READY, health, IN.ELIGIBLE)


@pytest.mark.parametrize("health", [H.UNKNOWN, H.HEALTHY, H.DEGRADED])
def test_a_validating_node_is_not_schedulable(health: Health) -> None:
    assert not is_schedulable(Approval.APPROVED, L.READY, health, IN.ELIGIBLE, True)
    assert derive_state(L.READY, health, IN.ELIGIBLE, True) == "VALIDATING"
    assert derive_state(L.READY, H.UNHEALTHY, IN.ELIGIBLE, True) == "UNHEALTHY"


@pytest.mark.parametrize(("approval", "lifecycle", "health", "intent"), [
    (Approval.PENDING, L.READY, H.HEALTHY, IN.ELIGIBLE),
    (Approval.REJECTED, L.READY, H.HEALTHY, IN.ELIGIBLE),
    (Approval.APPROVED, L.DEGRADED, H.HEALTHY, IN.ELIGIBLE),
    (Approval.APPROVED, L.DOWN, H.HEALTHY, IN.ELIGIBLE),
    (Approval.APPROVED, L.BOOTING, H.HEALTHY, IN.ELIGIBLE),
    (Approval.APPROVED, L.READY, H.UNHEALTHY, IN.ELIGIBLE),
    (Approval.APPROVED, L.READY, H.HEALTHY, IN.CORDONED),
    (Approval.APPROVED, L.READY, H.HEALTHY, IN.DRAINING),
    (Approval.APPROVED, L.READY, H.HEALTHY, IN.DRAINED),
    (Approval.APPROVED, L.READY, H.HEALTHY, IN.DISABLED),
])
def test_anything_else_is_not_schedulable(approval: Approval, lifecycle: Lifecycle,
                                          health: Health, intent: Intent) -> None:
    assert not is_schedulable(approval, lifecycle, health, intent)


def test_schedulable_nodes_show_ready() -> None:
    for approval, dims in itertools.product(Approval, ALL_DIMENSIONS):
        if is_schedulable(approval, *dims):
            assert derive_state(*dims) == "READY"


# --filter-state words ---------------------------------------------------------------


@pytest.mark.parametrize("state", STATE_ORDER)
def test_every_state_is_a_filter_word_in_any_case(state: str) -> None:
    for word in (state, state.lower(), state.capitalize(), f"  {state.lower()} "):
        assert resolve_state_filter([word]) == {state}


@pytest.mark.parametrize(("alias", "states"), [
    ("active", {"READY"}),
    ("connected", {"READY"}),
    ("healthy", {"READY"}),
    ("disconnected", {"DEGRADED", "DOWN"}),
    ("unhealthy", {"UNHEALTHY"}),
])
def test_aliases_in_any_case(alias: str, states: set[str]) -> None:
    for word in (alias, alias.upper(), alias.title()):
        assert resolve_state_filter([word]) == states


def test_every_alias_maps_to_known_states() -> None:
    for states in STATE_ALIASES.values():
        assert states <= set(STATE_ORDER)


def test_words_are_united() -> None:
    assert resolve_state_filter(["cordoned", "Disconnected", "READY"]) == {
        "CORDONED", "DEGRADED", "DOWN", "READY"}
    assert resolve_state_filter([]) == frozenset()


@pytest.mark.parametrize("word", ["asleep", "", "ready,down", "PENDING", "approved"])
def test_unknown_words_are_refused(word: str) -> None:
    with pytest.raises(ValueError, match="unknown state") as excinfo:
        resolve_state_filter(["ready", word])
    assert repr(word) in str(excinfo.value)
    assert "disconnected" in str(excinfo.value)  # the choices are listed
