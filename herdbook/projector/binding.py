"""What the projector checks of a stored message beyond its subject (``events.authority``),
and what a refused one still does to the view: pure functions of the read model."""

from __future__ import annotations

from msgspec.structs import replace

from herdbook.events.alloc import AllocEvent
from herdbook.events.authority import Unvouched, family_of
from herdbook.events.codec import AnyEvent
from herdbook.events.subjects import ID_PATTERN, node_id_of_subject
from herdbook.projector.tables import ReadModel


def check_owner(model: ReadModel, event: AnyEvent) -> None:
    """An allocation event counts only on the subjects of the node the allocation was
    placed on: n1's agent may not report on n2's allocation by its id."""
    if isinstance(event, AllocEvent):
        placed = model.allocs.get(event.alloc_id)
        if placed is not None and placed.node_id != event.node_id:
            raise Unvouched(f"allocation {event.alloc_id} is on node {placed.node_id}, "
                            f"not {event.node_id}")


def skip_refused(model: ReadModel, subject: str, seq: int) -> None:
    """A refused message still moves the version of the node whose subject it is on:
    a version is the subject's last stored sequence whatever the body, so one bad
    message never wedges a node's conditional appends (DESIGN §9)."""
    family = family_of(subject)
    if family is None or family.prefix not in ("node", "alloc"):
        return
    node_id = node_id_of_subject(subject)
    if not ID_PATTERN.fullmatch(node_id):
        return
    if family.prefix == "alloc":
        model.alloc_versions.put(node_id, seq)
        return
    view = model.nodes.get(node_id)
    if view is not None:
        model.nodes.put(node_id, replace(view, version=seq))
