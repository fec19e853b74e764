"""The state machine tables: every allowed and every refused transition, and the README
tables checked against the code."""

from __future__ import annotations

import itertools
from pathlib import Path

import msgspec
import pytest

from herdbook.events.machine import (
    INTENT,
    LIFECYCLE,
    IntentTrigger,
    intent_table_markdown,
    lifecycle_table_markdown,
    next_intent,
    next_lifecycle,
)
from herdbook.events.machine import LifecycleTrigger as Trigger
from herdbook.events.states import Approval, Health, Intent, Lifecycle, NodeType
from herdbook.projector.node_view import NodeView
from herdbook.reactors import intents
from herdbook.reactors.refused import AlreadyDone, CommandRefused

L, I = Lifecycle, Intent  # noqa: E741

ALLOWED_LIFECYCLE = [
    (L.UNKNOWN, Trigger.AGENT_STARTED, L.BOOTING),
    (L.BOOTING, Trigger.AGENT_STARTED, L.BOOTING),
    (L.READY, Trigger.AGENT_STARTED, L.BOOTING),
    (L.DEGRADED, Trigger.AGENT_STARTED, L.BOOTING),
    (L.DOWN, Trigger.AGENT_STARTED, L.BOOTING),
    (L.FAILED, Trigger.AGENT_STARTED, L.BOOTING),
    (L.DOWN, Trigger.REBOOT, L.BOOTING),
    (L.FAILED, Trigger.REBOOT, L.BOOTING),
    (L.BOOTING, Trigger.BOOT_PASSED, L.READY),
    (L.BOOTING, Trigger.BOOT_FAILED, L.BOOTING),
    (L.BOOTING, Trigger.BOOT_TIMEOUT, L.FAILED),
    (L.READY, Trigger.HEARTBEAT_MISSED, L.DEGRADED),
    (L.DEGRADED, Trigger.HEARTBEAT_RESUMED, L.READY),
    (L.DEGRADED, Trigger.GRACE_EXPIRED, L.DOWN),
    (L.UNKNOWN, Trigger.FATAL, L.DOWN),
    (L.BOOTING, Trigger.FATAL, L.DOWN),
    (L.READY, Trigger.FATAL, L.DOWN),
    (L.DEGRADED, Trigger.FATAL, L.DOWN),
    (L.UNKNOWN, Trigger.DISABLE, L.DOWN),
    (L.BOOTING, Trigger.DISABLE, L.DOWN),
    (L.READY, Trigger.DISABLE, L.DOWN),
    (L.DEGRADED, Trigger.DISABLE, L.DOWN),
    (L.DOWN, Trigger.DISABLE, L.DOWN),
    (L.FAILED, Trigger.DISABLE, L.DOWN),
    (L.QUARANTINED, Trigger.DISABLE, L.DOWN),       # `herd node disable` retires it
    (L.DOWN, Trigger.ENABLE, L.READY),
    (L.DOWN, Trigger.PARTITION_HEALED, L.READY),
    *[(state, Trigger.TERMINATE, L.TERMINATED) for state in Lifecycle
      if state is not L.TERMINATED],
    # sensitive wipe (Lattice): BOOTING while the agent wipes, READY or QUARANTINED after
    *[(state, Trigger.WIPE, L.BOOTING)
      for state in (L.READY, L.DEGRADED, L.DOWN, L.FAILED, L.QUARANTINED, L.BOOTING)],
    (L.BOOTING, Trigger.WIPE_PASSED, L.READY),
    *[(state, Trigger.WIPE_FAILED, L.QUARANTINED)
      for state in (L.BOOTING, L.READY, L.DEGRADED, L.DOWN)],
    *[(state, Trigger.QUARANTINE, L.QUARANTINED)
      for state in (L.BOOTING, L.READY, L.DEGRADED, L.DOWN, L.FAILED)],
]

ALLOWED_INTENT = [
    (I.ELIGIBLE, IntentTrigger.CORDON, I.CORDONED),
    (I.CORDONED, IntentTrigger.UNCORDON, I.ELIGIBLE),
    (I.ELIGIBLE, IntentTrigger.DRAIN, I.DRAINING),
    (I.CORDONED, IntentTrigger.DRAIN, I.DRAINING),
    (I.DRAINING, IntentTrigger.DRAIN_COMPLETE, I.DRAINED),
    (I.DRAINING, IntentTrigger.UNDRAIN, I.ELIGIBLE),
    (I.DRAINED, IntentTrigger.UNDRAIN, I.ELIGIBLE),
    (I.ELIGIBLE, IntentTrigger.DISABLE, I.DISABLED),
    (I.CORDONED, IntentTrigger.DISABLE, I.DISABLED),
    (I.DRAINING, IntentTrigger.DISABLE, I.DISABLED),
    (I.DRAINED, IntentTrigger.DISABLE, I.DISABLED),
    (I.DISABLED, IntentTrigger.ENABLE, I.ELIGIBLE),
]


@pytest.mark.parametrize(("src", "trigger", "dst"), ALLOWED_LIFECYCLE)
def test_allowed_lifecycle_transition(src: Lifecycle, trigger: Trigger, dst: Lifecycle) -> None:
    assert next_lifecycle(src, trigger) is dst


REFUSED_LIFECYCLE = [
    (src, trigger) for src, trigger in itertools.product(Lifecycle, Trigger)
    if (src, trigger) not in {(s, t) for s, t, _ in ALLOWED_LIFECYCLE}
]


@pytest.mark.parametrize(("src", "trigger"), REFUSED_LIFECYCLE)
def test_refused_lifecycle_transition(src: Lifecycle, trigger: Trigger) -> None:
    assert next_lifecycle(src, trigger) is None


@pytest.mark.parametrize(("src", "command", "dst"), ALLOWED_INTENT)
def test_allowed_intent_transition(src: Intent, command: IntentTrigger, dst: Intent) -> None:
    assert next_intent(src, command) is dst


REFUSED_INTENT = [
    (src, command) for src, command in itertools.product(Intent, IntentTrigger)
    if (src, command) not in {(s, c) for s, c, _ in ALLOWED_INTENT}
]


@pytest.mark.parametrize(("src", "command"), REFUSED_INTENT)
def test_refused_intent_transition(src: Intent, command: IntentTrigger) -> None:
    assert next_intent(src, command) is None


def test_the_tables_hold_exactly_the_listed_transitions() -> None:
    assert {(s, t): d for s, t, d in ALLOWED_LIFECYCLE} == LIFECYCLE
    assert {(s, c): d for s, c, d in ALLOWED_INTENT} == INTENT


def test_terminal_states_have_no_way_out() -> None:
    for trigger in Trigger:
        assert next_lifecycle(L.TERMINATED, trigger) is None
        # a quarantined node never leaves by itself: only an operator's forced wipe,
        # disable (retire) or termination
        expected = {Trigger.TERMINATE: L.TERMINATED, Trigger.WIPE: L.BOOTING,
                    Trigger.DISABLE: L.DOWN}.get(trigger)
        assert next_lifecycle(L.QUARANTINED, trigger) is expected


def test_the_readme_tables_are_the_code() -> None:
    readme = (Path(__file__).parents[2] / "docs" / "node-model.md").read_text()
    assert lifecycle_table_markdown() in readme
    assert intent_table_markdown() in readme


# the deciders consult the tables ---------------------------------------------------

def view(lifecycle: Lifecycle = L.READY, intent: Intent = I.ELIGIBLE,
         health: Health = Health.HEALTHY) -> NodeView:
    return NodeView(id="gpu-1", type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=lifecycle, intent=intent, health=health)


LIVE = intents.HeartbeatFacts(heartbeat_age=1.0, heartbeat_timeout=30.0, gpu_count=0,
                        fingerprint="abc")
STALE = intents.HeartbeatFacts(heartbeat_age=100.0, heartbeat_timeout=30.0, gpu_count=0,
                         fingerprint="abc")


@pytest.mark.parametrize("intent", list(Intent))
def test_cordon_follows_the_table(intent: Intent) -> None:
    if intent is I.CORDONED:   # the goal already holds: a success, nothing appended
        with pytest.raises(AlreadyDone, match="^node gpu-1 already cordoned \\(state CORDONED\\)$"):
            intents.decide_cordon(view(intent=intent), "op", "")
    elif next_intent(intent, IntentTrigger.CORDON) is None:
        with pytest.raises(CommandRefused, match="cannot cordon"):
            intents.decide_cordon(view(intent=intent), "op", "")
    else:
        assert intents.decide_cordon(view(intent=intent), "op", "why").reason == "why"


def test_uncordon_clears_unhealthy_and_is_refused_otherwise() -> None:
    assert intents.decide_uncordon(view(health=Health.UNHEALTHY), "op", "")
    assert intents.decide_uncordon(view(intent=I.CORDONED), "op", "")
    with pytest.raises(AlreadyDone, match="already uncordoned \\(state READY\\)"):
        intents.decide_uncordon(view(), "op", "")
    with pytest.raises(CommandRefused, match="neither cordoned nor unhealthy") as err:
        intents.decide_uncordon(view(intent=I.DRAINING), "op", "")
    assert not isinstance(err.value, AlreadyDone)


@pytest.mark.parametrize(("live", "message"), [
    (STALE, "no recent heartbeat"),
    (intents.HeartbeatFacts(heartbeat_age=1.0, heartbeat_timeout=30.0, gpu_count=7,
                      fingerprint="abc"), "reports 7 GPUs"),
    (intents.HeartbeatFacts(heartbeat_age=1.0, heartbeat_timeout=30.0, gpu_count=0), "fingerprint"),
])
def test_undrain_needs_the_health_check(live: intents.HeartbeatFacts, message: str) -> None:
    with pytest.raises(CommandRefused, match=message):
        intents.decide_undrain(view(intent=I.DRAINED), "op", "", live)
    assert intents.decide_undrain(view(intent=I.DRAINED), "op", "", LIVE)


def test_enable_needs_disabled_and_a_recent_heartbeat_unless_forced() -> None:
    disabled = view(lifecycle=L.DOWN, intent=I.DISABLED)
    with pytest.raises(AlreadyDone, match="already enabled \\(state DOWN\\)"):
        intents.decide_enable(view(lifecycle=L.DOWN), "op", "", LIVE)
    with pytest.raises(CommandRefused, match="--force"):
        intents.decide_enable(disabled, "op", "", STALE)
    event = intents.decide_enable(disabled, "op", "", STALE, force=True)
    assert msgspec.structs.asdict(event)["forced"] is True


@pytest.mark.parametrize("lifecycle", list(Lifecycle))
def test_reboot_takes_down_or_failed(lifecycle: Lifecycle) -> None:
    if lifecycle in (L.DOWN, L.FAILED):
        assert intents.decide_reboot(view(lifecycle=lifecycle), "op", "")
    else:
        with pytest.raises(CommandRefused):
            intents.decide_reboot(view(lifecycle=lifecycle), "op", "")


@pytest.mark.parametrize(("decide", "node", "said"), [
    (lambda v: intents.decide_cordon(v, "op", ""), view(intent=I.CORDONED),
     "already cordoned (state CORDONED)"),
    (lambda v: intents.decide_uncordon(v, "op", ""), view(), "already uncordoned (state READY)"),
    (lambda v: intents.decide_drain(v, "op", ""), view(intent=I.DRAINING),
     "already draining (state DRAINING)"),
    (lambda v: intents.decide_drain(v, "op", "", urgent=True), view(intent=I.DRAINED),
     "already drained (state DRAINED)"),
    (lambda v: intents.decide_undrain(v, "op", "", LIVE), view(), "already undrained (state READY)"),
    (lambda v: intents.decide_disable(v, "op", ""), view(lifecycle=L.DOWN, intent=I.DISABLED),
     "already disabled (state DOWN)"),
    (lambda v: intents.decide_enable(v, "op", "", STALE), view(intent=I.CORDONED),
     "already enabled (state CORDONED)"),
], ids=["cordon", "uncordon", "drain", "drain-drained", "undrain", "disable", "enable"])
def test_a_command_whose_goal_holds_is_already_done_with_the_state(decide, node, said) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AlreadyDone) as err:
        decide(node)
    assert str(err.value) == f"node gpu-1 {said}"


def test_a_drain_asking_for_more_than_the_running_one_is_not_a_no_op() -> None:
    with pytest.raises(CommandRefused, match="cannot drain") as err:
        intents.decide_drain(view(intent=I.DRAINING), "op", "", urgent=True)
    assert not isinstance(err.value, AlreadyDone)
    with pytest.raises(CommandRefused, match="cannot drain"):
        intents.decide_drain(view(intent=I.DRAINING), "op", "", deadline_s=60.0)
