"""The API's field types: the constrained strings every request is built from (an id, a
reason, a name, labels, with their limits in ``Meta`` so the server and the OpenAPI
document refuse the same values) and the words a list filter takes."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

from msgspec import Meta

from herdbook.events.alloc import AllocStatus
from herdbook.events.evals import EvalStatus
from herdbook.events.health_report import GPU_HEALTHS
from herdbook.events.states import STATE_ALIASES, STATE_ORDER, Approval
from herdbook.events.subjects import ID_PATTERN

MAX_PAGE_ITEMS = 5000

Id = Annotated[str, Meta(pattern=ID_PATTERN.pattern,
                         description="1-128 characters from A-Z a-z 0-9 _ -, or a unique "
                                     "prefix of an id where the route resolves one")]
"""A node, job, eval, allocation, instance or pool id (one NATS subject token)."""
OptionalId = Annotated[str, Meta(pattern=r"^([A-Za-z0-9_-]{1,128})?$",
                                 description="empty (any), or an id or unique prefix of one")]
"""A filter on an id: empty matches every one."""

MAX_REASON = 1024
"""The most characters of a command's reason (``--message``): it is stored on an event
for ever and shown in every list, log line and history."""
MAX_NAME = 128
"""The most characters of an actor, a user or a tenant."""
MAX_LABEL_KEY = 128
MAX_LABEL_VALUE = 256
MAX_LABELS = 64
"""The most labels one request sets or filters on."""

Reason = Annotated[str, Meta(max_length=MAX_REASON,
                             description=f"why: at most {MAX_REASON} characters")]
Name = Annotated[str, Meta(max_length=MAX_NAME,
                           description=f"at most {MAX_NAME} characters")]
Labels = Annotated[dict[Annotated[str, Meta(max_length=MAX_LABEL_KEY)],
                        Annotated[str, Meta(max_length=MAX_LABEL_VALUE)]],
                   Meta(max_length=MAX_LABELS,
                        description=f"at most {MAX_LABELS} labels, keys of at most "
                                    f"{MAX_LABEL_KEY} and values of at most "
                                    f"{MAX_LABEL_VALUE} characters")]


def words(name: str, values: Iterable[str], doc: str) -> type[StrEnum]:
    """The words a filter takes, as an enum of each value in lower and in upper case (the
    CLI passes what the operator typed; the API and the OpenAPI document name the exact
    words, so that a value is accepted exactly when the document says it is)."""
    both = dict.fromkeys(w for v in values for w in (v.lower(), v.upper()))
    kind = StrEnum(name, {w: w for w in both})   # type: ignore[misc]
    kind.__doc__ = doc
    return kind


GPU_HEALTH = GPU_HEALTHS
"""A GPU's health: its verdict's level (``events.health_report.VerdictLevel``), or
``unknown`` before its node's first verdict."""
JOB_STATUSES = ("running", "dead")
"""A job's status (``JobView.status``): dead once stopped."""

if TYPE_CHECKING:   # str to the type checker; at run time an enum msgspec checks
    StateWord = str
    ApprovalWord = str
    GpuHealthWord = str
    JobStatusWord = str
    EvalStatusWord = str
    AllocStatusWord = str
else:
    StateWord = words("StateWord", [*STATE_ORDER, *STATE_ALIASES],
                      "A node state (``herd node list``'s STATE) or an alias of some.")
    ApprovalWord = words("ApprovalWord", [a.value for a in Approval], "A node's approval.")
    GpuHealthWord = words("GpuHealthWord", GPU_HEALTH, "A GPU's health.")
    JobStatusWord = words("JobStatusWord", JOB_STATUSES, "A job's status.")
    EvalStatusWord = words("EvalStatusWord", [s.value for s in EvalStatus],
                           "An evaluation's status.")
    AllocStatusWord = words("AllocStatusWord", [s.value for s in AllocStatus],
                            "An allocation's status.")
