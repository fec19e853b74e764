"""``node.*``: list, describe, conformance, and the node commands (membership, intents,
claims, wipe, add), each decided by a pure decider and appended by the runner."""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from itertools import islice
from typing import Any, TypeVar

import msgspec
from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError

from herdbook.api.caller import caller
from herdbook.api.commands import VERBS, NodeVerb, decide_verb
from herdbook.api.lookup import ApiError, decode, resolve
from herdbook.api.messages import (
    MAX_PAGE_ITEMS,
    ById,
    CommandResult,
    GpuSummary,
    HeartbeatInfo,
    ListNodes,
    NodeCommand,
    NodeDescription,
    NodeDetail,
    NodeSummary,
    Page,
)
from herdbook.api.present import MAX_TEXT, NodeJsonCache, node_detail, node_summary, shown
from herdbook.config import Config
from herdbook.events.codec import decode_resources
from herdbook.events.liveness_settings import interval_warning
from herdbook.events.node import NodeEvent
from herdbook.events.states import Approval, Health, resolve_state_filter
from herdbook.events.store import EventStore
from herdbook.events.subjects import HEARTBEATS_STREAM, resources_subject
from herdbook.projector.node_view import NodeView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors import intents
from herdbook.reactors.decide_runner import Context, DecideRunner
from herdbook.reactors.heartbeats import NodeBeat
from herdbook.reactors.refused import AlreadyDone
from herdbook.reactors.sweeper import Sweeper
from herdbook.reactors.validation_deciders import failures_within, waiting
from herdbook.text import clip

PAGE_BYTES = 700_000          # replies stay well under NATS's 1 MB max_payload
APPROVALS: tuple[str, ...] = tuple(Approval)

C = TypeVar("C", bound=NodeCommand)
Handler = Callable[[bytes], Awaitable[Any]]
_encoder = msgspec.json.Encoder()


class NodeRoutes:
    def __init__(self, nc: NATS, store: EventStore, projector: ProjectorRunner,
                 sweeper: Sweeper, runner: DecideRunner, config: Config) -> None:
        self.nc = nc
        self.store = store
        self.projector = projector
        self.sweeper = sweeper
        self.runner = runner
        self.config = config
        self._counts: Counter[str] = Counter()
        self._counts_at = -1
        self._json = NodeJsonCache()
        self._ids: list[str] = []
        self._ids_set: set[str] = set()
        self._ids_rows: Mapping[str, NodeView] = {}
        self._ids_mark = (-1, -1)
        self.gpu_rows: Callable[[NodeView], list[GpuSummary]] | None = None
        """A node's GPUs with their health and readings (``api/gpus.py``), for describe."""

    def routes(self) -> dict[str, Handler]:
        """The queries, and one route per verb of the command table (``api/commands.py``)."""
        return {
            "node.list": self.node_list,
            "node.describe": self.node_describe,
            "node.conformance": self.node_conformance,
            **{verb.route: self._command(verb) for verb in VERBS},
        }

    # queries ------------------------------------------------------------------------
    def _alloc_counts(self) -> Counter[str]:
        """Live allocations per node, computed once per view position."""
        if self._counts_at != self.projector.folded_seq:
            self._counts = Counter(a.node_id for a in self.projector.allocs.values()
                                   if not a.terminal)
            self._counts_at = self.projector.folded_seq
        return self._counts

    def summary(self, view: NodeView) -> NodeSummary:
        return node_summary(view, self.sweeper.heartbeat_age(view.id),
                            self.sweeper.timeouts(view).heartbeat_timeout,
                            allocations=self._alloc_counts().get(view.id, 0),
                            clock=self.runner.clock)

    def detail(self, view: NodeView) -> NodeDetail:
        return node_detail(view, self.sweeper.heartbeat_age(view.id),
                           self.sweeper.timeouts(view).heartbeat_timeout,
                           allocations=self._alloc_counts().get(view.id, 0),
                           clock=self.runner.clock)

    def _sorted_ids(self) -> list[str]:
        """The node ids in order, sorted again only when the membership changed: checked
        when the view has folded something since the last call (one C-level set
        comparison), so the pages of one listing cost no sort each."""
        nodes = self.projector.nodes
        rows: Mapping[str, NodeView] = getattr(nodes, "rows", nodes)
        mark = (self.projector.folded_seq, len(rows))
        if rows is self._ids_rows and mark == self._ids_mark:
            return self._ids
        keys = rows.keys()
        if keys != self._ids_set:
            gone = self._ids_set - keys
            added = keys - self._ids_set
            if len(gone) + len(added) < 64 and rows is self._ids_rows:
                for node_id in gone:
                    del self._ids[bisect_left(self._ids, node_id)]
                for node_id in added:
                    insort(self._ids, node_id)
            else:
                self._ids = sorted(keys)
            self._ids_set = set(keys)
            self._json.keep_only(self._ids_set)
        self._ids_rows, self._ids_mark = rows, mark
        return self._ids

    async def node_list(self, data: bytes) -> msgspec.Raw:
        """A ``Page`` of ``NodeSummary`` (``NodeDetail`` with ``wide``) as its JSON: each
        node's bytes come from the cache (``NodeJsonCache``), the page starts by bisecting
        the sorted ids at ``next_token`` (the last id of the previous page)."""
        req = decode(data, ListNodes, empty=True)
        approvals = {a.upper() for a in req.filter_approval}
        bad = approvals - set(APPROVALS)
        if bad:
            raise ApiError("bad_request", f"unknown approval {sorted(bad)[0]!r}; choose from "
                                          "pending, approved, rejected")
        states = resolve_state_filter(req.filter_state) if req.filter_state else None
        limit = min(req.limit, MAX_PAGE_ITEMS)
        ids = self._sorted_ids()
        nodes: Mapping[str, NodeView] = self._ids_rows
        counts = self._alloc_counts()
        age = self.sweeper.heartbeat_age
        timeout = self._heartbeat_timeout
        item = self._json.item
        now = self.runner.clock.now().timestamp()
        items: list[bytes] = []
        size = 0
        next_token = last = None
        start = 0 if req.next_token is None else bisect_right(ids, req.next_token)
        for node_id in islice(ids, start, None):
            view = nodes[node_id]
            if approvals and view.approval.value not in approvals:
                continue
            if states is not None and view.state not in states and not (
                    "UNHEALTHY" in states and view.health is Health.UNHEALTHY):
                continue
            if req.labels and any(view.info.labels.get(k) != v for k, v in req.labels.items()):
                continue
            body = item(view, age(node_id), timeout, counts.get(node_id, 0), now,
                        wide=req.wide)
            size += len(body) + 1
            if items and (len(items) >= limit or size > PAGE_BYTES):
                next_token = last
                break
            items.append(body)
            last = node_id
        return msgspec.Raw(b'{"items":[' + b",".join(items) + b'],"next_token":'
                           + _encoder.encode(next_token) + b"}")

    def _heartbeat_timeout(self, view: NodeView) -> float:
        return self.sweeper.timeouts(view).heartbeat_timeout

    async def node_describe(self, data: bytes) -> NodeDescription:
        req = decode(data, ById)
        view: NodeView = resolve(self.projector.nodes, req.id, "node")
        beat = self.sweeper.beats.get(view.id)
        heartbeat = None if beat is None or not beat.boot_id else HeartbeatInfo(
            boot_id=clip(beat.boot_id, MAX_TEXT), seq=beat.seq, agent_sent_at=beat.sent_at,
            gpu_count=beat.gpu_count, running_allocs=beat.running_allocs,
            reattaching=beat.reattaching, fingerprint=shown(beat.fingerprint),
            interval=beat.interval)
        resources: dict[str, Any] | None
        try:
            msg = await self.nc.jetstream().get_last_msg(
                HEARTBEATS_STREAM, resources_subject(view.id), direct=True)
            resources = msgspec.to_builtins(decode_resources(msg.data or b""))
        except (NotFoundError, msgspec.DecodeError):
            resources = None
        detail = self.detail(view)
        timeout = self.sweeper.timeouts(view).heartbeat_timeout
        interval = None if heartbeat is None else heartbeat.interval
        window = float(self.config.validation.window)
        return NodeDescription(**{f: getattr(detail, f) for f in detail.__struct_fields__},
                               heartbeat=heartbeat, resources=resources,
                               heartbeat_interval=interval, heartbeat_timeout=timeout,
                               heartbeat_warning=None if interval is None
                               else interval_warning(interval, timeout),
                               agent=_agent_text(view, beat),
                               agent_conflict=self.sweeper.agent_conflict(view),
                               gpu_health=[] if self.gpu_rows is None else self.gpu_rows(view),
                               validation_failures=failures_within(
                                   view, window, self.runner.clock.now()),
                               validation_window_s=window,
                               validation_waiting=waiting(view, self.config.validation))

    async def node_conformance(self, data: bytes) -> Page[dict[str, Any]]:
        """The fleet grouped by conformance fingerprint, per pool, with what drifted."""
        groups: dict[tuple[str, str], list[NodeView]] = {}
        for view in self.projector.nodes.values():
            # A node held against nothing has no record (the sensitive reactor appends
            # none for a standard one): its heartbeat's fingerprint stands for it.
            beat = self.sweeper.beats.get(view.id)
            fp = view.fingerprint if view.fingerprint_expected else (
                (beat.fingerprint if beat is not None else "") or view.fingerprint)
            if fp:
                key = (view.info.labels.get("pool", ""), fp)
                groups.setdefault(key, []).append(view)
        items = [{"pool": pool or None, "fingerprint": fp, "nodes": len(members),
                  "expected": members[0].fingerprint_expected or None,
                  "drift": any(m.drift for m in members),
                  "node_ids": sorted(m.id for m in members)}
                 for (pool, fp), members in sorted(groups.items(),
                                                   key=lambda kv: (kv[0][0], -len(kv[1])))]
        return Page(items=items)

    # commands -----------------------------------------------------------------------
    def _command(self, verb: NodeVerb) -> Handler:
        """The route of ``verb``: decode its request, decide it on the node's view with
        the facts it reads, append through the runner."""
        async def handler(data: bytes) -> CommandResult:
            req = decode(data, verb.request)
            facts = _Facts(self, await self.store.last_sequence("node", req.id)
                           if verb.creates else 0)

            def decision(context: Context) -> Any:
                return decide_verb(verb, self.projector.nodes.get(req.id), req, caller(req),
                                   facts, context)

            try:
                appended = await self.runner.run("node", req.id, decision)
            except AlreadyDone as done:   # the goal already holds: a success, nothing appended
                view = self.projector.nodes.get(req.id)
                return CommandResult(event="", event_id="", unchanged=str(done),
                                     seq=0 if view is None else view.version,
                                     node=None if view is None else self.detail(view))
            return self._result(req.id, appended.events[0], appended.seq)
        return handler

    def _result(self, node_id: str, event: NodeEvent, seq: int) -> CommandResult:
        after = self.projector.nodes.get(node_id)
        return CommandResult(event=event.event_name, event_id=event.event_id, seq=seq,
                             node=None if after is None else self.detail(after))


class _Facts:
    """What a verb's decider reads besides the view (``commands.Facts``), each answered
    only when asked: a cordon reads none of it."""

    def __init__(self, routes: NodeRoutes, last_sequence: int) -> None:
        self._routes = routes
        self.last_sequence = last_sequence
        self.wipe_timeout = float(routes.config.sensitive.wipe_timeout)
        check = routes.config.validation
        self.validation = check if check.enabled else None

    def heartbeat(self, view: NodeView) -> intents.HeartbeatFacts:
        sweeper = self._routes.sweeper
        beat = sweeper.beats.get(view.id)
        return intents.HeartbeatFacts(
            heartbeat_age=sweeper.heartbeat_age(view.id),
            heartbeat_timeout=sweeper.timeouts(view).heartbeat_timeout,
            gpu_count=None if beat is None else beat.gpu_count,
            fingerprint=None if beat is None else beat.fingerprint)

    def live_allocations(self, view: NodeView) -> int:
        return self._routes._alloc_counts().get(view.id, 0)


def _agent_text(view: NodeView, beat: NodeBeat | None) -> str | None:
    """Who speaks for the node: the process of its last counted heartbeat, else the one
    that announced its boot."""
    agent = beat.agent if beat is not None and beat.agent is not None else view.agent
    return None if agent is None else agent.describe()
