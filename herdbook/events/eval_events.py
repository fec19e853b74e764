"""Evaluation events (aggregate ``eval``): ``herd.eval.<id>.<event>``."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from herdbook.events.base import Event
from herdbook.events.evals import EvalStatus, Step
from herdbook.events.evals import EvalTrigger as Trigger


class EvalEvent(Event, frozen=True, kw_only=True):
    aggregate: ClassVar[str] = "eval"

    eval_id: str

    @property
    def aggregate_id(self) -> str:
        return self.eval_id


class EvalCreated(EvalEvent, frozen=True, kw_only=True, tag="eval.created"):
    job_id: str
    triggered_by: Trigger
    status: EvalStatus = EvalStatus.PENDING
    priority: int = 50
    previous_eval: str | None = None
    node_id: str | None = None
    wait_until: datetime | None = None
    """A delayed eval is not dequeued before this time."""


class EvalStatusChanged(EvalEvent, frozen=True, kw_only=True, tag="eval.status_changed"):
    """One solid arrow of the reference diagram: ``step`` took the eval to ``status``."""

    step: Step
    status: EvalStatus
    reason: str = ""


class EvalEnqueued(EvalStatusChanged, frozen=True, kw_only=True, tag="eval.enqueued"):
    """A step that hands the eval to the broker again (unblocked, retried): its own subject
    ``herd.eval.<id>.enqueued``, which the broker's consumer reads beside ``created``."""


class EvalLinked(EvalEvent, frozen=True, kw_only=True, tag="eval.linked"):
    """The old eval's NextEval or BlockedEval pointer, set when a new eval is spawned."""

    next_eval: str | None = None
    blocked_eval: str | None = None
