"""The API's wire: every request and reply as a msgspec Struct, imported by the server
(``herdbook.api``) and the CLI (``herdbook.cli.client``) alike (msgspec's
``examples/asyncio-kv``). Constraints live in ``Meta``; a request that breaks one, or
names a field its route does not take, is answered ``bad_request`` naming the field.

Envelope: ``{"ok": true, "result": ...}`` or ``{"ok": false, "code": ..., "error": ...}``
with ``code`` one of ``ErrorCode``. The reply of a route is its ``result``.

One module over ~300 lines on purpose: it is the whole wire of one API version, read
side by side with DESIGN §7; splitting it would split one schema across files.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Generic, TypeVar

import msgspec
import msgspec.inspect
from msgspec import Meta

from herdbook.events.alloc import AllocStatus
from herdbook.events.evals import EvalStatus, EvalTrigger
from herdbook.events.health_report import GPU_HEALTHS
from herdbook.events.job_events import Constraints, JobSpec, Requeue, Resources
from herdbook.events.states import (
    STATE_ALIASES,
    STATE_ORDER,
    Approval,
    Health,
    Intent,
    Lifecycle,
    NodeClass,
    NodeType,
)
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


class ErrorCode(StrEnum):
    REFUSED = "refused"
    NOT_FOUND = "not_found"
    BAD_REQUEST = "bad_request"
    UNAVAILABLE = "unavailable"
    STORAGE_FULL = "storage_full"
    INTERNAL = "internal"


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


# replies --------------------------------------------------------------------------------
class _Reply(msgspec.Struct, frozen=True, kw_only=True):
    pass


T = TypeVar("T")


class Page(_Reply, Generic[T], frozen=True, kw_only=True):
    items: list[T]
    next_token: str | None = None


class NodeSummary(_Reply, frozen=True, kw_only=True):
    """A node in ``node.list``. ``heartbeating``: a heartbeat arrived within the node's
    heartbeat_timeout (a DOWN node whose partition healed shows as DOWN but
    heartbeating)."""

    id: str
    type: NodeType
    node_class: NodeClass = msgspec.field(name="class")
    approval: Approval
    lifecycle: Lifecycle
    health: Health
    intent: Intent
    state: str
    schedulable: bool
    labels: dict[str, str]
    pool: str | None
    last_heartbeat: str | None
    heartbeat_age: float | None
    heartbeating: bool
    allocations: int
    gpus: int
    fingerprint_group: str | None
    claimed_by: str | None


class GpuDevice(_Reply, frozen=True, kw_only=True):
    index: int
    uuid: str
    name: str
    memory_bytes: int


class NodeDetail(NodeSummary, frozen=True, kw_only=True):
    """A node with everything known about it: ``node.list`` with ``wide``, the node of a
    command's result, and the base of ``node.describe``."""

    hostname: str
    arch: str
    os: str
    cpus: int
    memory_bytes: int
    gpu_devices: list[GpuDevice]
    agent_version: str
    instance_id: str | None
    boot_id: str
    registered_at: str | None
    updated_at: str | None
    approval_reason: str
    approval_actor: str
    approval_at: str | None
    lifecycle_reason: str
    lifecycle_at: str | None
    intent_reason: str
    intent_actor: str
    intent_at: str | None
    drain_urgent: bool
    drain_deadline: str | None
    boot_failures: int
    health_reason: str
    notification_error: str
    boot_checks: dict[str, str]
    last_event: str
    fingerprint: str | None
    fingerprint_expected: str | None
    drift: bool
    tenant: str | None
    claimed_at: str | None
    wipe_status: str | None
    wipe_attempt: int
    wipe_steps: dict[str, str]
    version: int
    recommended_action: str | None = None
    """What to do about the node's health verdict (``health.actions``): none,
    restart_workload, reset_gpu, reboot_node or inspect_hardware; None before a verdict
    recorded one."""
    validation: str | None = None
    """The node's last validation (docs/remediation.md#validation): running (the node is
    VALIDATING), passed, failed, interrupted (it went DOWN meanwhile); None: never
    validated."""
    validation_due: str | None = None
    """Why it must be validated before it is back in service: returned (it was DOWN,
    FAILED or UNHEALTHY), approved (its first approval); None: it need not be."""
    validation_trigger: str | None = None
    """What started the last validation: returned, approved or operator."""
    validation_check: str | None = None
    """The check's name (``validation.name``)."""
    validation_alloc: str | None = None
    """The allocation that runs (ran) the check: `herd alloc status ID`."""
    validation_started_at: str | None = None
    validation_at: str | None = None
    """When the last validation ended (None while it runs)."""
    validation_reason: str | None = None
    """How the last validation ended (or why it runs), in one line."""


class GpuSummary(_Reply, frozen=True, kw_only=True):
    """A GPU in ``gpu.list``: identity, health with its cause (the classifier's verdict,
    ``NodeView.gpus``), its node's state, and the main readings of its latest telemetry
    sample (None: not measured, or no sample yet)."""

    node_id: str
    index: int
    uuid: str | None
    serial: str | None
    model: str | None
    hostname: str | None
    health: str
    """One of ``GPU_HEALTH``."""
    cause: str | None
    """The verdict's reason ("rule: what matched"), None for a healthy GPU."""
    since: str | None
    """When the verdict was first decided (the report's stored time)."""
    node_state: str
    node_health: Health
    pool: str | None
    temperature_c: float | None
    power_w: float | None
    gpu_util_pct: float | None
    fb_used_mib: float | None
    fb_total_mib: float | None
    sampled_at: str | None
    """When the agent sampled the readings (its clock)."""
    recommended_action: str | None = None
    """What to do about the GPU's verdict (``health.actions``); None for a healthy GPU."""
    power_limit_w: float | None = None
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    remapped_rows_uncorrectable: int | None = None
    """The error counters a fleet GPU table sorts by (the console's GPU view)."""


class GpuFault(_Reply, frozen=True, kw_only=True):
    at: str
    kind: str
    xid: int | None


class GpuPull(_Reply, frozen=True, kw_only=True):
    """The GPU (by serial) took a node out: a critical or fatal verdict on one of its
    events, once per node and boot."""

    at: str
    node_id: str
    boot_id: str


class GpuVerdictReply(_Reply, frozen=True, kw_only=True):
    level: str
    rule: str
    reason: str
    kind: str
    xid: int | None
    since: str | None
    recommended_action: str | None = None
    """What to do about it (``health.actions``)."""


class GpuDetail(GpuSummary, frozen=True, kw_only=True):
    """``gpu.describe``: the summary, every reading of the latest sample, the verdict
    with its cause, the GPU's recent faults and their counts (the classifier's fault
    history: HERD_HEALTH's reports of the last 7 days), and the serial's history
    across nodes: when it took a node out, and which nodes list it now."""

    pci_bus_id: str | None
    driver_version: str | None
    readings: dict[str, Any] | None
    received_at: str | None
    verdict: GpuVerdictReply | None
    node_health_reason: str
    faults: list[GpuFault]
    """The newest first, at most ``MAX_FAULTS``."""
    fault_counts: dict[str, dict[str, int]]
    """``{"24h": {kind: n}, "7d": {kind: n}}``; an XID counts as ``xid <code>``."""
    serial_pulls: list[GpuPull]
    serial_seen_on: list[str]
    """Node ids whose info or telemetry lists this GPU's UUID or serial now."""


class HeartbeatInfo(_Reply, frozen=True, kw_only=True):
    boot_id: str
    seq: int
    agent_sent_at: float
    gpu_count: int | None
    running_allocs: int | None
    reattaching: bool
    fingerprint: str | None
    interval: float | None = None


class NodeDescription(NodeDetail, frozen=True, kw_only=True):
    """``node.describe``: the node, its last heartbeat and its last resource report;
    the heartbeat interval its agent reports against the node's heartbeat timeout, and
    why that interval cannot keep it READY (``events.liveness.interval_warning``)."""

    heartbeat: HeartbeatInfo | None
    resources: dict[str, Any] | None
    heartbeat_interval: float | None = None
    heartbeat_timeout: float | None = None
    heartbeat_warning: str | None = None
    agent: str | None = None
    """The agent process that announced the node's current boot: host, pid, since when."""
    agent_conflict: str | None = None
    """Set while two agents heartbeat for this node id (one must be stopped)."""
    gpu_health: list[GpuSummary] = []
    """Every GPU of the node with its health, cause and main readings (``gpu.list``)."""
    validation_failures: int = 0
    """Its failed validations within ``validation.window`` (now less the window): the
    ``validation.quarantine_after``-th quarantines it."""
    validation_window_s: float | None = None
    validation_waiting: bool = False
    """Due for a validation the gate runs (``validation.when``) and able to run it, but not
    started yet: it waits for a free slot (``validation.max_concurrent``). The scheduler
    places nothing on it meanwhile."""


class CommandResult(_Reply, frozen=True, kw_only=True):
    """A node command: the event it appended and the node once the view holds it; or,
    where the command's goal already held, nothing appended (``event``, ``event_id``
    empty, ``seq`` the node's version) and ``unchanged`` saying so with the state."""

    event: str
    event_id: str
    seq: int
    node: NodeDetail | None
    unchanged: str = ""
    """E.g. ``node gpu-1 already cordoned (state CORDONED)``: a success, exit 0."""


class InstanceReply(_Reply, frozen=True, kw_only=True):
    id: str
    pool: str
    provider: str
    node_id: str
    state: str
    node_class: NodeClass = msgspec.field(name="class")
    provider_ref: str
    replaces: str | None
    reason: str
    errors: list[str]
    created_at: str | None
    state_at: str | None


class EvalReply(_Reply, frozen=True, kw_only=True):
    id: str
    job_id: str
    status: EvalStatus
    triggered_by: EvalTrigger
    previous_eval: str | None
    next_eval: str | None
    blocked_eval: str | None
    priority: int
    node_id: str | None
    wait_until: str | None
    status_reason: str
    created_at: str | None
    modified_at: str | None


class EvalChain(_Reply, frozen=True, kw_only=True):
    """``eval.status``: the eval, and its chain from the first PreviousEval forward."""

    eval: EvalReply
    chain: list[EvalReply]


class AllocReply(_Reply, frozen=True, kw_only=True):
    id: str
    job_id: str
    node_id: str
    index: int
    status: AllocStatus
    desired: str
    exit_code: int | None
    requeue_count: int
    requeue_allowed: bool
    previous_alloc: str | None
    migrate: bool
    eval_id: str
    pid: int | None
    reattached: bool
    status_reason: str
    resources: Resources
    command: list[str]
    job_version: int
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    modified_at: str | None


class RequeueResult(_Reply, frozen=True, kw_only=True):
    alloc: AllocReply
    eval_id: str


class JobReply(_Reply, frozen=True, kw_only=True):
    id: str
    status: str
    version: int
    count: int
    priority: int
    command: list[str]
    resources: Resources
    constraints: Constraints
    requeue: Requeue
    evals: list[EvalReply]
    stop_reason: str
    allocations: dict[str, int]
    phase: str = ""
    """What the job does now (``placement_why.PHASES``): a finished one is complete or
    dead, never running; ``status`` stays registered (running) or stopped (dead)."""
    placement: dict[str, Any] | None = None
    """While a slot waits to be placed: per constraint and resource, how many nodes
    ruled it out (``placement_why.explain``); None when nothing waits."""


class JobSummary(_Reply, frozen=True, kw_only=True):
    """A job in ``job.list``: ``job.status`` without its spec's details and evaluations;
    ``allocations``: how many it has in each status."""

    id: str
    status: str
    version: int
    count: int
    priority: int
    allocations: dict[str, int]
    phase: str = ""
    """As ``JobReply.phase``."""


class RegisterResult(_Reply, frozen=True, kw_only=True):
    job: JobReply
    eval_id: str


# the envelope ---------------------------------------------------------------------------
class Ok(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool = True
    result: Any


class Failed(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool = False
    code: ErrorCode
    error: str


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    """Either envelope as a client reads it: the result left undecoded until the
    route's reply type decodes it."""

    ok: bool
    result: msgspec.Raw = msgspec.Raw(b"null")
    code: str = ""
    error: str = ""
