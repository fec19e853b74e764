"""The API's requests: every request Struct, reads and commands. A request that breaks
a constraint, or names a field its route does not take, is answered ``bad_request``
naming the field."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import msgspec.inspect
from msgspec import Meta

from herdbook.api.field_types import (
    MAX_PAGE_ITEMS,
    MAX_REASON,
    AllocStatusWord,
    ApprovalWord,
    EvalStatusWord,
    GpuHealthWord,
    Id,
    JobStatusWord,
    Labels,
    Name,
    OptionalId,
    Reason,
    StateWord,
)
from herdbook.events.job_events import JobSpec
from herdbook.events.states import NodeClass


class _Request(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    def __post_init__(self) -> None:
        # msgspec checks a pattern with Python's re.search, whose ``$`` also matches before
        # a final newline: ``"gpu-1\n"`` would pass ``^[A-Za-z0-9_-]{1,128}$``, which JSON
        # Schema (the OpenAPI document) reads as refusing it. A patterned field ending in
        # a newline is refused here, so the server and the document agree.
        for name in _patterned(type(self)):
            value = getattr(self, name)
            if isinstance(value, str) and value.endswith("\n"):
                raise ValueError(f"Expected `str` matching its pattern, not ending in a "
                                 f"newline - at `$.{name}`")


_PATTERNED: dict[type[Any], tuple[str, ...]] = {}


def _patterned(kind: type[Any]) -> tuple[str, ...]:
    """The fields of a request Struct whose string has a pattern (looked up once)."""
    found = _PATTERNED.get(kind)
    if found is None:
        def bare(t: Any) -> Any:
            return bare(t.type) if isinstance(t, msgspec.inspect.Metadata) else t
        info = msgspec.inspect.type_info(kind)
        names = []
        for field in getattr(info, "fields", ()):
            kinds = [bare(k) for k in getattr(bare(field.type), "types", (field.type,))]
            if any(isinstance(k, msgspec.inspect.StrType) and k.pattern for k in kinds):
                names.append(field.name)
        found = _PATTERNED[kind] = tuple(names)
    return found


# requests: reads ------------------------------------------------------------------------
class ById(_Request, frozen=True, kw_only=True):
    """``node.describe``, ``instance.describe``, ``job.status``, ``eval.status``,
    ``alloc.status``: one thing by id or unique prefix."""

    id: Id


class ListNodes(_Request, frozen=True, kw_only=True):
    filter_approval: list[ApprovalWord] = []
    filter_state: list[StateWord] = []
    labels: Labels = {}
    wide: bool = False
    limit: Annotated[int, Meta(ge=1)] = MAX_PAGE_ITEMS
    next_token: str | None = None


class ListGpus(_Request, frozen=True, kw_only=True):
    """``gpu.list``: every GPU of the fleet, or those of nodes with these labels, of one
    node (id or unique prefix), with one of these healths (``GPU_HEALTH``)."""

    labels: Labels = {}
    health: list[GpuHealthWord] = []
    node_id: OptionalId = ""
    limit: Annotated[int, Meta(ge=1)] = MAX_PAGE_ITEMS
    next_token: Annotated[str, Meta(pattern=r"^([\s\S]*/[0-9]{1,9})?$")] | None = None
    """``<node id>/<index>`` of the last GPU of the previous page."""


class GpuById(_Request, frozen=True, kw_only=True):
    """``gpu.describe``: one GPU by its node (id or unique prefix) and index."""

    node_id: Id
    index: Annotated[int, Meta(ge=0, le=1023)]


class ListInstances(_Request, frozen=True, kw_only=True):
    pool: OptionalId = ""


class PoolByName(_Request, frozen=True, kw_only=True):
    pool: Id


class ListEvals(_Request, frozen=True, kw_only=True):
    status: list[EvalStatusWord] = []
    job_id: OptionalId = ""


class ListAllocs(_Request, frozen=True, kw_only=True):
    node_id: OptionalId = ""
    job_id: OptionalId = ""
    status: list[AllocStatusWord] = []


class ListJobs(_Request, frozen=True, kw_only=True):
    """``job.list``: every job, or those with one of these statuses (``JOB_STATUSES``)."""

    status: list[JobStatusWord] = []


# requests: commands ---------------------------------------------------------------------
class CommandRequest(_Request, frozen=True, kw_only=True):
    """What every command carries: its target, why, and who (the actor is recorded only
    on the plain route subject; on ``<route>.<user>`` the user is)."""

    id: Id
    reason: Reason = ""
    actor: Name = "operator"


class NodeCommand(CommandRequest, frozen=True, kw_only=True):
    """``node.approve|reject|delete|cordon|uncordon|undrain|disable|reboot``."""


class DrainNode(NodeCommand, frozen=True, kw_only=True):
    urgent: bool = False
    deadline_s: Annotated[float, Meta(gt=0)] | None = None


class EnableNode(NodeCommand, frozen=True, kw_only=True):
    force: bool = False
    """Even without a recent heartbeat."""


class WipeNode(NodeCommand, frozen=True, kw_only=True):
    force: bool = False
    """Required: the wipe erases the node's disks."""


class ClaimNode(NodeCommand, frozen=True, kw_only=True):
    user: Name = ""
    tenant: Name = ""


class ReleaseNode(NodeCommand, frozen=True, kw_only=True):
    user: Name = ""
    """Who the claim is released for (default: who claimed it)."""


class AddNode(NodeCommand, frozen=True, kw_only=True):
    node_class: NodeClass = NodeClass.STANDARD
    labels: Labels = {}


class StopJob(CommandRequest, frozen=True, kw_only=True):
    pass


class RetryEval(CommandRequest, frozen=True, kw_only=True):
    pass


class RequeueAlloc(CommandRequest, frozen=True, kw_only=True):
    pass


class RegisterJob(_Request, frozen=True, kw_only=True):
    spec: JobSpec
    """A job spec as ``herd job run`` reads it from YAML (``events.jobs.JobSpec``)."""
    actor: Name = "operator"


class ScalePool(_Request, frozen=True, kw_only=True):
    pool: Id
    size: Annotated[int, Meta(ge=0)] | None = None
    reason: Reason = ""
    actor: Name = "operator"


class ResetBreaker(_Request, frozen=True, kw_only=True):
    """``herd breaker reset``: close one scope (``fleet``, ``pool:<name>``) or, empty,
    every scope."""

    scope: Annotated[str, Meta(max_length=140, pattern=r"^(|fleet|pool:[A-Za-z0-9_-]+)$")] = ""
    reason: Annotated[str, Meta(min_length=1, max_length=MAX_REASON)]
    actor: Name = "operator"
