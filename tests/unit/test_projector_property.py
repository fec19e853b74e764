"""DESIGN §9: the view is disposable. Folding a random history in batches, with a restart
(close, reopen, load) between batches, gives the same SQLite view and checkpoint as a
rebuild that folds everything at once. And no history makes the fold raise."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from herdbook.events.codec import AnyEvent, decode_event, encode
from herdbook.events.node import (
    NodeApproved,
    NodeDegraded,
    NodeDeleted,
    NodeDown,
    NodeInfo,
    NodeInfoUpdated,
    NodeRecovered,
    NodeRegistered,
    NodeRejected,
)
from herdbook.events.states import NodeClass, NodeType
from herdbook.projector import schema
from herdbook.projector.node_fold import apply
from herdbook.projector.node_view import NodeView

STREAM = "HERD_EVENTS"
NODE_IDS = st.sampled_from(["gpu-001", "gpu-002", "cpu-1", "requester-a"])
TEXT = st.text(alphabet="abcxyz -", max_size=6)

infos = st.builds(
    NodeInfo,
    hostname=TEXT,
    cpus=st.integers(0, 256),
    labels=st.dictionaries(st.sampled_from(["rack", "zone"]), TEXT, max_size=2),
    node_class=st.sampled_from(NodeClass),
)

events = st.one_of(
    st.builds(NodeRegistered, node_id=NODE_IDS, node_type=st.sampled_from(NodeType),
              boot_id=st.sampled_from(["boot-a", "boot-b"]), info=infos),
    st.builds(NodeInfoUpdated, node_id=NODE_IDS, info=infos),
    st.builds(NodeApproved, node_id=NODE_IDS, actor=TEXT, reason=TEXT),
    st.builds(NodeRejected, node_id=NODE_IDS, actor=TEXT, reason=TEXT),
    st.builds(NodeDeleted, node_id=NODE_IDS, reason=TEXT),
    st.builds(NodeDegraded, node_id=NODE_IDS, heartbeat_age=st.floats(30, 1e4), reason=TEXT),
    st.builds(NodeRecovered, node_id=NODE_IDS, reason=TEXT),
    st.builds(NodeDown, node_id=NODE_IDS, reason=TEXT),
)


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[tuple[int, AnyEvent]], list[int]]:
    """Events at sequences 1..n and the cut points that split them into batches."""
    drawn = draw(st.lists(events, min_size=1, max_size=40))
    history = list(enumerate(drawn, start=1))
    cuts = draw(st.sets(st.integers(1, len(history)), max_size=6)) | {len(history)}
    return history, sorted(cuts)


def fold(views: dict[str, NodeView], batch: list[tuple[int, AnyEvent]]) -> set[str]:
    """What the runner does per event: apply, keep or drop, mark dirty."""
    changed: set[str] = set()
    for seq, event in batch:
        new = apply(views.get(event.node_id), event, seq)
        if new is None:
            views.pop(event.node_id, None)
        else:
            views[event.node_id] = new
        changed.add(event.node_id)
    return changed


async def incremental(path: str, history: list[tuple[int, AnyEvent]],
                      cuts: list[int]) -> None:
    start = 0
    for end in cuts:
        batch = history[start:end]
        db = await schema.open_db(path)
        try:
            views, checkpoint = await schema.load(db, STREAM)
            assert checkpoint == start  # the restart resumes where the last batch ended
            changed = fold(views, batch)
            await schema.write_batch(db, STREAM, views, changed, batch[-1][0])
        finally:
            await db.close()
        start = end


async def rebuild(path: str, history: list[tuple[int, AnyEvent]]) -> dict[str, NodeView]:
    db = await schema.open_db(path)
    try:
        views, checkpoint = await schema.load(db, STREAM)
        assert (views, checkpoint) == ({}, 0)
        changed = fold(views, history)
        await schema.write_batch(db, STREAM, views, changed, history[-1][0])
    finally:
        await db.close()
    return views


async def loaded(path: str) -> tuple[dict[str, NodeView], int]:
    db = await schema.open_db(path)
    try:
        return await schema.load(db, STREAM)
    finally:
        await db.close()


async def incremental_and_rebuild(
        tmp: Path, history: list[tuple[int, AnyEvent]], cuts: list[int],
) -> tuple[tuple[dict[str, NodeView], int], tuple[dict[str, NodeView], int],
           dict[str, NodeView]]:
    await incremental(str(tmp / "incremental.db"), history, cuts)
    in_memory = await rebuild(str(tmp / "rebuilt.db"), history)
    return (await loaded(str(tmp / "incremental.db")), await loaded(str(tmp / "rebuilt.db")),
            in_memory)


@settings(max_examples=60, deadline=None)
@given(histories())
def test_incremental_view_equals_rebuilt_view(
        case: tuple[list[tuple[int, AnyEvent]], list[int]]) -> None:
    history, cuts = case
    with tempfile.TemporaryDirectory() as tmp:
        (inc_views, inc_seq), (reb_views, reb_seq), in_memory = asyncio.run(
            incremental_and_rebuild(Path(tmp), history, cuts))
    assert inc_seq == reb_seq == len(history)
    assert inc_views == reb_views
    assert reb_views == in_memory  # and SQLite holds exactly what was folded


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 10**9), events), max_size=60))
def test_no_event_sequence_makes_the_fold_raise(
        history: list[tuple[int, AnyEvent]]) -> None:
    views: dict[str, NodeView] = {}
    fold(views, history)
    for node_id, view in views.items():
        assert view.id == node_id
        assert view.state  # every view derives a state


@settings(max_examples=100, deadline=None)
@given(events)
def test_generated_events_round_trip(event: AnyEvent) -> None:
    assert decode_event(encode(event)) == event
