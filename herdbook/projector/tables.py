"""The read model: one typed table per aggregate, filled only by the projector.

Readers see each table as a read-only ``Mapping`` and subscribe to its changes with a
typed listener ``(key, row or None, event)``, told synchronously as the projector
folds, in stream order. Nothing outside ``projector/`` writes a table: ``put`` and the
dirty set are the projector's side (what its next SQLite batch writes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar, overload

from herdbook.events.alloc import AllocEvent
from herdbook.events.breaker_events import BreakerEvent
from herdbook.events.codec import AnyEvent
from herdbook.events.eval_events import EvalEvent
from herdbook.events.instance import InstanceEvent
from herdbook.events.job_events import JobEvent
from herdbook.events.node import NodeEvent
from herdbook.events.pool import PoolScaled
from herdbook.projector.alloc_view import AllocView, apply_alloc
from herdbook.projector.eval_view import EvalView, apply_eval
from herdbook.projector.instance_view import InstanceView, apply_instance
from herdbook.projector.job_view import JobView, apply_job
from herdbook.projector.node_fold import apply
from herdbook.projector.node_view import NodeView

Row = TypeVar("Row")
Ev = TypeVar("Ev")
T = TypeVar("T")


class Table(Mapping[str, Row], Generic[Row, Ev]):
    """The rows of one aggregate kind by id, and who wants to hear of their changes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._rows: dict[str, Row] = {}
        self._dirty: set[str] = set()
        self._listeners: list[Callable[[str, Row | None, Ev], None]] = []

    def __getitem__(self, key: str) -> Row:
        return self._rows[key]

    @overload
    def get(self, key: str, /) -> Row | None: ...
    @overload
    def get(self, key: str, /, default: Row | T) -> Row | T: ...

    def get(self, key: str, /, default: Any = None) -> Any:
        # The dict's own get: Mapping.get goes through __getitem__ and a KeyError, and
        # the fold calls this once per event.
        return self._rows.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def subscribe(self, listener: Callable[[str, Row | None, Ev], None]) -> Callable[[], None]:
        """Tell ``listener`` of every change folded from now on; returns the unsubscribe."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)
        return unsubscribe

    # the projector's side --------------------------------------------------------------
    def put(self, key: str, row: Row | None, event: Ev | None = None) -> None:
        """Store (or, with None, remove) one row; with the event that made it, tell the
        listeners. Marks the row for the next commit."""
        if row is None:
            self._rows.pop(key, None)
        else:
            self._rows[key] = row
        self._dirty.add(key)
        if event is not None and self._listeners:
            for listener in list(self._listeners):
                listener(key, row, event)

    def load(self, rows: dict[str, Row]) -> None:
        """Replace every row (what was committed), nothing dirty, nobody told."""
        self._rows = dict(rows)
        self._dirty = set()

    def take_dirty(self) -> set[str]:
        dirty, self._dirty = self._dirty, set()
        return dirty

    def mark_dirty(self, keys: set[str]) -> None:
        self._dirty |= keys

    @property
    def rows(self) -> Mapping[str, Row]:
        return self._rows

    def __repr__(self) -> str:
        return f"Table({self.name!r}, {len(self._rows)} rows)"


class ReadModel:
    """Every table the projector keeps, by the aggregate it folds."""

    def __init__(self) -> None:
        self.nodes: Table[NodeView, NodeEvent] = Table("nodes")
        self.allocs: Table[AllocView, AllocEvent] = Table("allocs")
        self.alloc_versions: Table[int, AllocEvent] = Table("alloc_versions")
        """The last sequence of each node's allocation aggregate (``herd.alloc.<node>.>``)
        folded here: the expected version of a plan decided from this view."""
        self.evals: Table[EvalView, EvalEvent] = Table("evals")
        self.jobs: Table[JobView, JobEvent] = Table("jobs")
        self.instances: Table[InstanceView, InstanceEvent] = Table("instances")
        self.pool_sizes: Table[int, PoolScaled] = Table("pools")

    def fold(self, seq: int, event: AnyEvent) -> None:
        """Fold one event stored at ``seq`` into its table (listeners told)."""
        if isinstance(event, NodeEvent):   # most of a stream: one check, not five
            self.nodes.put(event.node_id, apply(
                self.nodes.get(event.node_id), event, seq), event)
            return
        match event:
            case InstanceEvent():
                self.instances.put(event.instance_id, apply_instance(
                    self.instances.get(event.instance_id), event, seq), event)
            case AllocEvent():
                self.alloc_versions.put(event.node_id, seq)
                self.allocs.put(event.alloc_id, apply_alloc(
                    self.allocs.get(event.alloc_id), event, seq), event)
            case EvalEvent():
                self.evals.put(event.eval_id, apply_eval(
                    self.evals.get(event.eval_id), event, seq), event)
            case JobEvent():
                self.jobs.put(event.job_id, apply_job(
                    self.jobs.get(event.job_id), event, seq), event)
            case PoolScaled():
                self.pool_sizes.put(event.pool, event.size, event)
            case BreakerEvent():
                pass   # folded by reactors/breaker.py from herd.breaker.>
            case _:
                self.nodes.put(event.node_id, apply(
                    self.nodes.get(event.node_id), event, seq), event)

    def tables(self) -> tuple[Table[object, object], ...]:
        """Nodes first and pool sizes last: the order ``schema.write_batch`` takes them."""
        return (self.nodes, self.allocs, self.alloc_versions, self.evals,  # type: ignore[return-value]
                self.jobs, self.instances, self.pool_sizes)
