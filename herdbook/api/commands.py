"""The node commands, once: every verb an operator applies to a node (``herd node cordon``,
``POST /v1/nodes/{id}/cordon``, the console's button) is one ``NodeVerb`` in ``VERBS``,
and everything else is generated from that table:

- the NATS routes ``node.<verb>`` (``api/nodes.py``, one handler for all),
- the HTTP action paths ``POST /v1/nodes/{id}/<verb>`` and their OpenAPI operations
  (``web/http_api.py``, ``web/openapi.py``),
- the CLI commands with their options, confirmations and --help (``cli/node_actions.py``),
- the console's buttons, extra controls and confirmation dialogs (``web/console``, which
  reads ``spec_json()`` from ``/console/node-commands.json``).

A new verb is one entry here (and its decider); ``tests/unit/test_command_spec.py`` fails
if any of those lists a verb this table lacks, or lacks one it has.

The CLI imports this table to build its commands, so it stays light: the deciders'
modules (which import the event fold and NATS) are imported inside the small adapters
below, when a command is decided on the control plane, never by ``herd --help``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from herdbook.api.messages import (
    AddNode,
    ClaimNode,
    DrainNode,
    EnableNode,
    NodeCommand,
    ReleaseNode,
    WipeNode,
)
from herdbook.events.states import NodeClass

if TYPE_CHECKING:
    from herdbook.config import ValidationConfig
    from herdbook.events.node import NodeEvent
    from herdbook.projector.node_view import NodeView
    from herdbook.reactors.decide_runner import Context, Decision
    from herdbook.reactors.intents import HeartbeatFacts

GROUPS = ("scheduling", "service", "membership", "sensitive nodes", "inventory")
"""The verbs' groups, in the order the console's node page shows them."""

OptionKind = Literal["flag", "text", "duration", "class", "labels"]


@dataclass(frozen=True)
class Option:
    """A request field beyond ``id`` and ``reason``: a CLI option ``--<name>`` and a
    console control ``#<verb>-<name>``. ``kind``: ``flag`` (a bool; ``required``: it must
    be given, and the console sends it true behind a typed confirmation), ``text``,
    ``duration`` (``30m``, sent as seconds), ``class`` (a node class), ``labels``
    (``k=v[,k=v]``)."""

    name: str
    field: str
    kind: OptionKind
    help: str
    """The CLI's help line."""
    label: str
    """The console's words for the control (and for a missing ``required`` text)."""
    required: bool = False


@dataclass(frozen=True)
class Confirm:
    """The question asked before the command is sent: ``question`` with ``{nodes}``
    naming the node(s), then ``detail`` (``detail_many`` when it names several).
    ``when``: only if this request field is true (an urgent drain). ``typed``: the
    console wants the node's id typed. ``cli``: the CLI asks too (a scripted ``herd node
    delete`` does not; the console's button, one misclick away, does)."""

    question: str
    detail: str
    detail_many: str | None = None
    when: str | None = None
    typed: bool = False
    cli: bool = True

    def for_cli(self) -> tuple[str, str]:
        """The CLI's question for one node and for many."""
        return (f"{self.question} {self.detail}",
                f"{self.question} {self.detail_many or self.detail}")


class Facts(Protocol):
    """What a decider may read besides the node's view, its request and the context,
    answered by ``api/nodes.py`` when the verb asks."""

    wipe_timeout: float
    validation: ValidationConfig | None
    """The configured validation check, None when off."""

    last_sequence: int
    """The node aggregate's last sequence, read for a ``creates`` verb (a deleted node has
    events but no view); 0 for the others."""

    def heartbeat(self, view: NodeView) -> HeartbeatFacts: ...

    def live_allocations(self, view: NodeView) -> int: ...


Decide = Callable[[Any, Any, str, "Facts", "Context"], "Decision[NodeEvent]"]
"""``(view, request, actor, facts, context)``: the view is None only for a ``creates``
verb, the others are refused ``not_found`` before they are decided."""


@dataclass(frozen=True)
class NodeVerb:
    name: str
    request: type[NodeCommand]
    decide: Decide
    help: str
    """The CLI's docstring (first line: its summary, the OpenAPI description's too)."""
    group: str
    idempotent: bool
    """Sending it again when its goal holds answers ``unchanged``, appends nothing."""
    bulk: bool = False
    """Takes many nodes: the CLI's ids and selection, the console's fleet toolbar."""
    confirm: Confirm | None = None
    options: tuple[Option, ...] = ()
    cli: tuple[str, ...] = ("node",)
    """Where the CLI command lives (``herd admin node wipe``)."""
    page: bool = True
    """A button on the console's node page (``add``: a node with no page yet)."""
    creates: bool = False
    """Acts on a node that need not exist (``add``): decided from the aggregate's last
    sequence, not a view."""

    @property
    def route(self) -> str:
        return f"node.{self.name}"


def decide_verb(verb: NodeVerb, view: NodeView | None, request: NodeCommand, actor: str,
                facts: Facts, context: Context) -> Decision[NodeEvent]:
    """``verb`` decided on the node's view (None: no such node, refused ``not_found``
    unless the verb ``creates`` it). Pure, as its decider is."""
    if view is None and not verb.creates:
        from herdbook.api.lookup import ApiError
        raise ApiError("not_found", f"node {request.id} not found")
    return verb.decide(view, request, actor, facts, context)


def _one(view: NodeView, event: NodeEvent) -> Decision[NodeEvent]:
    from herdbook.reactors.decide_runner import Decision
    return Decision(view.version, [event])


def _membership(name: str) -> Decide:
    def decide(view: NodeView, req: NodeCommand, actor: str, facts: Facts,
               context: Context) -> Decision[NodeEvent]:
        from herdbook.reactors import membership
        return _one(view, getattr(membership, f"decide_{name}")(view, actor, req.reason))
    return decide


def _intent(name: str) -> Decide:
    """An intent decider that takes only the view, the actor and the reason."""
    def decide(view: NodeView, req: NodeCommand, actor: str, facts: Facts,
               context: Context) -> Decision[NodeEvent]:
        from herdbook.reactors import intents
        return _one(view, getattr(intents, f"decide_{name}")(view, actor, req.reason))
    return decide


def _drain(view: NodeView, req: DrainNode, actor: str, facts: Facts,
           context: Context) -> Decision[NodeEvent]:
    from herdbook.reactors import intents
    return _one(view, intents.decide_drain(view, actor, req.reason, req.urgent, req.deadline_s))


def _undrain(view: NodeView, req: NodeCommand, actor: str, facts: Facts,
             context: Context) -> Decision[NodeEvent]:
    from herdbook.reactors import intents
    return _one(view, intents.decide_undrain(view, actor, req.reason, facts.heartbeat(view)))


def _enable(view: NodeView, req: EnableNode, actor: str, facts: Facts,
            context: Context) -> Decision[NodeEvent]:
    from herdbook.reactors import intents
    return _one(view, intents.decide_enable(view, actor, req.reason, facts.heartbeat(view),
                                            req.force))


def _validate(view: NodeView, req: NodeCommand, actor: str, facts: Facts,
              context: Context) -> Decision[NodeEvent]:
    from herdbook.reactors.validation_deciders import decide_validate_request
    return decide_validate_request(view, facts.validation, facts.live_allocations(view),
                                   actor, req.reason, context)


def _claim(view: NodeView, req: ClaimNode, actor: str, facts: Facts,
           context: Context) -> Decision[NodeEvent]:
    from herdbook.reactors import intents
    return _one(view, intents.decide_claim(view, actor, req.user, req.tenant, req.reason))


def _release(view: NodeView, req: ReleaseNode, actor: str, facts: Facts,
             context: Context) -> Decision[NodeEvent]:
    from herdbook.reactors import intents
    return _one(view, intents.decide_release(view, actor, req.user, req.reason))


def _wipe(view: NodeView, req: WipeNode, actor: str, facts: Facts,
          context: Context) -> Decision[NodeEvent]:
    from herdbook.reactors import intents
    return _one(view, intents.decide_wipe(view, actor, req.reason, req.force,
                                          facts.wipe_timeout))


def _add(view: NodeView | None, req: AddNode, actor: str, facts: Facts,
         context: Context) -> Decision[NodeEvent]:
    from herdbook.api.deciders import decide_add_node
    from herdbook.reactors.decide_runner import Decision
    declared = decide_add_node(view, facts.last_sequence, req.id, actor=actor,
                               reason=req.reason, node_class=req.node_class, labels=req.labels,
                               context=context)
    return Decision(declared.expected, list(declared.events))


_DELETE_DETAIL = "It leaves the view; an agent that registers again under this id is PENDING."

VERBS: tuple[NodeVerb, ...] = (
    NodeVerb("approve", NodeCommand, _membership("approve"), group="membership",
             idempotent=True, bulk=True,
             help="Approve PENDING (or REJECTED) nodes so they can take part in the "
                  "cluster.\n\nExample: herd node approve -l rack=r1 --filter-approval pending"),
    NodeVerb("reject", NodeCommand, _membership("reject"), group="membership",
             idempotent=True, bulk=True,
             help="Reject nodes; they stay REJECTED even if they register again."),
    NodeVerb("delete", NodeCommand, _membership("delete"), group="membership",
             idempotent=False, bulk=True,
             confirm=Confirm("Delete node {nodes}?", _DELETE_DETAIL, cli=False),
             help="Remove nodes from the view; an agent that registers again is PENDING."),
    NodeVerb("add", AddNode, _add, group="inventory", idempotent=False, page=False,
             creates=True,
             options=(Option("class", "node_class", "class", ", ".join(NodeClass) + ".",
                             "node class"),
                      Option("labels", "labels", "labels", "k=v[,k=v]", "labels")),
             help="Declare a node that has not reported yet: it is UNKNOWN until its agent "
                  "starts."),
    NodeVerb("cordon", NodeCommand, _intent("cordon"), group="scheduling", idempotent=True,
             bulk=True,
             help="Stop scheduling new work on nodes; running work continues.\n\n"
                  "Example: herd node cordon -l rack=r3 -m 'rack PDU swap'"),
    NodeVerb("uncordon", NodeCommand, _intent("uncordon"), group="scheduling",
             idempotent=True, bulk=True,
             help="Schedule on nodes again; also clears UNHEALTHY or DEGRADED (a held fault) "
                  "once the hardware was checked."),
    NodeVerb("drain", DrainNode, _drain, group="scheduling", idempotent=True, bulk=True,
             confirm=Confirm("Drain {nodes} urgently?", "Its allocations will be "
                             "checkpointed.", "Their allocations will be checkpointed.",
                             when="urgent"),
             options=(Option("urgent", "urgent", "flag", "Checkpoint running allocations (asks "
                             "for confirmation).", "urgent (checkpoint running work)"),
                      Option("deadline", "deadline_s", "duration", "Stop what still runs "
                             "after this long, e.g. 30m.", "deadline, e.g. 30m")),
             help="Move work off nodes: DRAINING, then DRAINED when nothing runs on them."),
    NodeVerb("undrain", NodeCommand, _undrain, group="scheduling", idempotent=True, bulk=True,
             help="Schedule on draining or drained nodes again.\n\nEach must pass the health "
                  "check: a recent heartbeat, a GPU count equal to its capabilities, a "
                  "reported fingerprint."),
    NodeVerb("disable", NodeCommand, _intent("disable"), group="service", idempotent=True,
             bulk=True,
             confirm=Confirm("Disable {nodes}?", "It goes DOWN now and its allocations are "
                             "requeued.", "They go DOWN now and their allocations are "
                             "requeued."),
             help="Take nodes DOWN at once (asks for confirmation: allocations are requeued)."),
    NodeVerb("enable", EnableNode, _enable, group="service", idempotent=True, bulk=True,
             options=(Option("force", "force", "flag", "Even without a recent heartbeat.",
                             "even without a recent heartbeat"),),
             help="Bring disabled nodes back (DOWN -> READY).\n\nEach needs a recent "
                  "heartbeat unless --force."),
    NodeVerb("reboot", NodeCommand, _intent("reboot"), group="service", idempotent=False,
             bulk=True,
             help="Request a reboot of DOWN or FAILED nodes: BOOTING until their boot check "
                  "passes."),
    NodeVerb("validate", NodeCommand, _validate, group="service", idempotent=True, bulk=True,
             help="Run the configured validation check (config validation:) on READY nodes "
                  "that run nothing: VALIDATING until it passes (back in service) or fails "
                  "(UNHEALTHY).\n\nExample: herd node validate -l rack=r3 -m 'after the PDU "
                  "swap'"),
    NodeVerb("claim", ClaimNode, _claim, group="sensitive nodes", idempotent=False,
             options=(Option("user", "user", "text", "Who claims it.", "who claims the node",
                             required=True),
                      Option("tenant", "tenant", "text", "For which tenant.", "tenant")),
             help="Claim a sensitive node for a user (the first claim wins; the other is "
                  "refused)."),
    NodeVerb("release", ReleaseNode, _release, group="sensitive nodes", idempotent=True,
             help="End a claim: the node drains if other sensitive allocations run, then it "
                  "is wiped and returns to the pool (or is QUARANTINED if the wipe fails or "
                  "times out)."),
    NodeVerb("wipe", WipeNode, _wipe, group="sensitive nodes", idempotent=False,
             cli=("admin", "node"),
             confirm=Confirm("Wipe {nodes}?", "GPU memory, NVMe and RAM are erased.",
                             typed=True),
             options=(Option("force", "force", "flag", "Required: the wipe erases the node's "
                             "disks.", "erase the node's disks", required=True),),
             help="Wipe a sensitive node again (a QUARANTINED node's way back to the pool)."),
)
"""Every node command, in the order `herd node --help` lists them."""

BY_NAME = {verb.name: verb for verb in VERBS}


def spec_json() -> list[dict[str, Any]]:
    """What the console builds its buttons, controls and dialogs from
    (``/console/node-commands.json``): the table less its Python (types, deciders)."""
    return [{"name": v.name, "group": v.group, "summary": v.help.split("\n", 1)[0],
             "bulk": v.bulk, "page": v.page, "idempotent": v.idempotent,
             "confirm": None if v.confirm is None else {
                 "question": v.confirm.question.replace("{nodes}", "{id}"),
                 "detail": v.confirm.detail, "when": v.confirm.when,
                 "typed": v.confirm.typed},
             "options": [{"name": o.name, "field": o.field, "kind": o.kind, "label": o.label,
                          "required": o.required} for o in v.options]}
            for v in VERBS]
