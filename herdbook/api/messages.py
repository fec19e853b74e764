"""The API's wire: every request and reply as a msgspec Struct, imported by the server
(``herdbook.api``) and the CLI (``herdbook.cli.client``) alike (msgspec's
``examples/asyncio-kv``). Constraints live in ``Meta``; a request that breaks one, or
names a field its route does not take, is answered ``bad_request`` naming the field.

Envelope: ``{"ok": true, "result": ...}`` or ``{"ok": false, "code": ..., "error": ...}``
with ``code`` one of ``ErrorCode``. The reply of a route is its ``result``.

This module is the wire's one import path (the server's routes, the CLI, the web layer
and the tests import from here); its parts live beside it, one job each: the field types
and filter words (``field_types``), the envelope and the reply base (``envelope``), the
requests (``request_messages``), the replies about nodes and GPUs (``node_replies``) and
about jobs, evaluations, allocations and instances (``work_replies``).
"""

from __future__ import annotations

from herdbook.api.envelope import (
    Envelope,
    ErrorCode,
    Failed,
    Ok,
    Page,
)
from herdbook.api.field_types import (
    GPU_HEALTH,
    JOB_STATUSES,
    MAX_LABEL_KEY,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_NAME,
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
    words,
)
from herdbook.api.node_replies import (
    CommandResult,
    GpuDetail,
    GpuDevice,
    GpuFault,
    GpuPull,
    GpuSummary,
    GpuVerdictReply,
    HeartbeatInfo,
    NodeDescription,
    NodeDetail,
    NodeSummary,
)
from herdbook.api.request_messages import (
    AddNode,
    ById,
    ClaimNode,
    CommandRequest,
    DrainNode,
    EnableNode,
    GpuById,
    ListAllocs,
    ListEvals,
    ListGpus,
    ListInstances,
    ListJobs,
    ListNodes,
    NodeCommand,
    PoolByName,
    RegisterJob,
    ReleaseNode,
    RequeueAlloc,
    ResetBreaker,
    RetryEval,
    ScalePool,
    StopJob,
    WipeNode,
)
from herdbook.api.work_replies import (
    AllocReply,
    EvalChain,
    EvalReply,
    InstanceReply,
    JobReply,
    JobSummary,
    RegisterResult,
    RequeueResult,
)

__all__ = [
    "AddNode", "AllocReply", "AllocStatusWord", "ApprovalWord", "ById", "ClaimNode",
    "CommandRequest", "CommandResult", "DrainNode", "EnableNode", "Envelope", "ErrorCode",
    "EvalChain", "EvalReply", "EvalStatusWord", "Failed", "GPU_HEALTH", "GpuById",
    "GpuDetail", "GpuDevice", "GpuFault", "GpuHealthWord", "GpuPull", "GpuSummary",
    "GpuVerdictReply", "HeartbeatInfo", "Id", "InstanceReply", "JOB_STATUSES", "JobReply",
    "JobStatusWord", "JobSummary", "Labels", "ListAllocs", "ListEvals", "ListGpus",
    "ListInstances", "ListJobs", "ListNodes", "MAX_LABELS", "MAX_LABEL_KEY",
    "MAX_LABEL_VALUE", "MAX_NAME", "MAX_PAGE_ITEMS", "MAX_REASON", "Name", "NodeCommand",
    "NodeDescription", "NodeDetail", "NodeSummary", "Ok", "OptionalId", "Page",
    "PoolByName", "Reason", "RegisterJob", "RegisterResult", "ReleaseNode", "RequeueAlloc",
    "RequeueResult", "ResetBreaker", "RetryEval", "ScalePool", "StateWord", "StopJob",
    "WipeNode", "words",
]
