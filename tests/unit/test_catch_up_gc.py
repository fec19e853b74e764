"""While the projector catches up, young objects are collected less often; the thresholds
come back as they were once the last holder (they may nest: a catch-up and plans) is
over. The state is an object each projector owns (``runner.gc``), not module globals."""

from __future__ import annotations

import gc

from herdbook.projector.catch_up_gc import CATCH_UP_GC_GEN0, CatchUpGc


def test_thresholds_raised_inside_and_restored_after_the_last_one() -> None:
    before = gc.get_threshold()
    held = CatchUpGc()
    try:
        gc.set_threshold(700, 10, 10)
        with held.hold():
            assert gc.get_threshold() == (CATCH_UP_GC_GEN0, 10, 10)
            with held.hold():
                assert gc.get_threshold() == (CATCH_UP_GC_GEN0, 10, 10)
            assert gc.get_threshold() == (CATCH_UP_GC_GEN0, 10, 10)
        assert gc.get_threshold() == (700, 10, 10) and held.holders == 0
    finally:
        gc.set_threshold(*before)


def test_restored_when_the_catch_up_fails() -> None:
    before = gc.get_threshold()
    try:
        with CatchUpGc().hold():
            raise RuntimeError("fold failed")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before


def test_the_heap_is_frozen_only_while_its_freezer_runs() -> None:
    """Overlapping holders (a catch-up, then plans) do not keep the heap frozen between
    them: whoever froze it unfreezes it when it leaves."""
    held = CatchUpGc()
    assert gc.get_freeze_count() == 0
    first = held.hold()
    first.__enter__()
    assert gc.get_freeze_count() > 0
    second = held.hold()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0          # the freezer left: unfrozen
    assert gc.get_threshold()[0] == CATCH_UP_GC_GEN0   # the other still holds the thresholds
    third = held.hold()
    third.__enter__()                          # comes in while unfrozen: freezes again
    assert gc.get_freeze_count() > 0
    third.__exit__(None, None, None)
    second.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0


def test_two_owners_in_one_process_leave_the_thresholds_as_they_found_them() -> None:
    """Two planes in one process (tests, benchmarks): each projector owns one, and their
    holds interleave. The one that leaves last never puts back the raised thresholds it
    found on entering."""
    before = gc.get_threshold()
    a, b = CatchUpGc(), CatchUpGc()
    try:
        gc.set_threshold(700, 10, 10)
        outer_a, inner_b = a.hold(), b.hold()
        outer_a.__enter__()
        inner_b.__enter__()                    # finds A's raised thresholds
        outer_a.__exit__(None, None, None)     # A leaves first: puts back 700
        inner_b.__exit__(None, None, None)     # B must not put back A's 50,000
        assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0
    finally:
        gc.set_threshold(*before)


def test_each_projector_owns_its_collector_state() -> None:
    from nats.aio.client import Client as NATS

    from herdbook.projector.projection import ProjectorRunner

    one, other = (ProjectorRunner(NATS(), ":memory:") for _ in range(2))   # not connected
    assert isinstance(one.gc, CatchUpGc) and one.gc is not other.gc


class Row:
    """A tracked object made inside a holder, as a rebuild's view rows are."""


def frozen(obj: object) -> bool:
    return not any(obj is other for generation in range(3)
                   for other in gc.get_objects(generation))


def test_refreeze_freezes_what_was_made_inside_until_its_freezer_leaves() -> None:
    """A rebuild's last commit encodes every row while the young generation fills: the
    view it folded is frozen first, so no collection walks it; unfrozen on leaving."""
    held = CatchUpGc()
    assert gc.get_freeze_count() == 0
    with held.hold():
        row = Row()
        assert not frozen(row)
        held.refreeze()
        assert frozen(row)
    assert not frozen(row) and gc.get_freeze_count() == 0


def test_refreeze_outside_a_holder_does_nothing() -> None:
    row = Row()
    CatchUpGc().refreeze()
    assert not frozen(row) and gc.get_freeze_count() == 0
