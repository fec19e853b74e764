"""While the projector catches up, young objects are collected less often; the thresholds
come back as they were once the last catch-up (they may nest: two runners) is over."""

from __future__ import annotations

import gc

from herdbook.projector.runner import CATCH_UP_GC_GEN0, catch_up_gc, refreeze


def test_thresholds_raised_inside_and_restored_after_the_last_one() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with catch_up_gc():
            assert gc.get_threshold() == (CATCH_UP_GC_GEN0, 10, 10)
            with catch_up_gc():
                assert gc.get_threshold() == (CATCH_UP_GC_GEN0, 10, 10)
            assert gc.get_threshold() == (CATCH_UP_GC_GEN0, 10, 10)
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_restored_when_the_catch_up_fails() -> None:
    before = gc.get_threshold()
    try:
        with catch_up_gc():
            raise RuntimeError("fold failed")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before


def test_the_heap_is_frozen_only_while_its_freezer_runs() -> None:
    """Overlapping holders (a catch-up, then plans) do not keep the heap frozen between
    them: whoever froze it unfreezes it when it leaves."""
    assert gc.get_freeze_count() == 0
    first = catch_up_gc()
    first.__enter__()
    assert gc.get_freeze_count() > 0
    second = catch_up_gc()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0          # the freezer left: unfrozen
    assert gc.get_threshold()[0] == CATCH_UP_GC_GEN0   # the other still holds the thresholds
    third = catch_up_gc()
    third.__enter__()                          # comes in while unfrozen: freezes again
    assert gc.get_freeze_count() > 0
    third.__exit__(None, None, None)
    second.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0


class Row:
    """A tracked object made inside a holder, as a rebuild's view rows are."""


def frozen(obj: object) -> bool:
    return not any(obj is other for generation in range(3)
                   for other in gc.get_objects(generation))


def test_refreeze_freezes_what_was_made_inside_until_its_freezer_leaves() -> None:
    """A rebuild's last commit encodes every row while the young generation fills: the
    view it folded is frozen first, so no collection walks it; unfrozen on leaving."""
    assert gc.get_freeze_count() == 0
    with catch_up_gc():
        row = Row()
        assert not frozen(row)
        refreeze()
        assert frozen(row)
    assert not frozen(row) and gc.get_freeze_count() == 0


def test_refreeze_outside_a_holder_does_nothing() -> None:
    row = Row()
    refreeze()
    assert not frozen(row) and gc.get_freeze_count() == 0
