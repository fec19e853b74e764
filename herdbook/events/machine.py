"""The node state machine: every allowed transition of the lifecycle and of the
operator intent, as tables in code (DESIGN §4, Lattice's state machine).

A transition that is not in a table is refused. Deciders consult these tables before
they append; the tables in docs/node-model.md are checked against them by a test.
"""

from __future__ import annotations

from enum import StrEnum

from herdbook.events.states import Intent, Lifecycle

L = Lifecycle
I = Intent  # noqa: E741 - reads as the table's column name


class LifecycleTrigger(StrEnum):
    """What moves the lifecycle."""

    AGENT_STARTED = "agent_started"        # the agent (re)started: registered or boot_started
    REBOOT = "reboot"                      # `herd node reboot`: reboot/reimage requested
    BOOT_PASSED = "boot_passed"            # the agent's boot check passed
    BOOT_FAILED = "boot_failed"            # a boot check failed (the 3rd in a row: FAILED)
    BOOT_TIMEOUT = "boot_timeout"          # BOOTING longer than lifecycle.boot_timeout
    HEARTBEAT_MISSED = "heartbeat_missed"  # no heartbeat for heartbeat_timeout
    HEARTBEAT_RESUMED = "heartbeat_resumed"  # within the grace period
    GRACE_EXPIRED = "grace_expired"
    FATAL = "fatal"                        # a fatal hardware event: DOWN at once
    DISABLE = "disable"
    ENABLE = "enable"
    PARTITION_HEALED = "partition_healed"  # same boot heartbeats again (recover_down_on_heartbeat)
    TERMINATE = "terminate"                # its instance was terminated
    WIPE = "wipe"                          # a sensitive node's wipe started (release, --force)
    WIPE_PASSED = "wipe_passed"            # every wipe step confirmed: back in the pool
    WIPE_FAILED = "wipe_failed"            # a step failed or sensitive.wipe_timeout passed
    QUARANTINE = "quarantine"              # failed validation quarantine_after times in its window


class IntentTrigger(StrEnum):
    """What moves the operator intent."""

    CORDON = "cordon"
    UNCORDON = "uncordon"
    DRAIN = "drain"
    DRAIN_COMPLETE = "drain_complete"      # the node runs no allocation any more
    UNDRAIN = "undrain"
    DISABLE = "disable"
    ENABLE = "enable"


T = LifecycleTrigger
_LIVE = (L.BOOTING, L.READY, L.DEGRADED)

LIFECYCLE: dict[tuple[Lifecycle, LifecycleTrigger], Lifecycle] = {
    (L.UNKNOWN, T.AGENT_STARTED): L.BOOTING,
    (L.BOOTING, T.AGENT_STARTED): L.BOOTING,
    (L.READY, T.AGENT_STARTED): L.BOOTING,
    (L.DEGRADED, T.AGENT_STARTED): L.BOOTING,
    (L.DOWN, T.AGENT_STARTED): L.BOOTING,
    (L.FAILED, T.AGENT_STARTED): L.BOOTING,
    (L.DOWN, T.REBOOT): L.BOOTING,
    (L.FAILED, T.REBOOT): L.BOOTING,
    (L.BOOTING, T.BOOT_PASSED): L.READY,
    (L.BOOTING, T.BOOT_FAILED): L.BOOTING,  # the fold turns the 3rd into FAILED
    (L.BOOTING, T.BOOT_TIMEOUT): L.FAILED,
    (L.READY, T.HEARTBEAT_MISSED): L.DEGRADED,
    (L.DEGRADED, T.HEARTBEAT_RESUMED): L.READY,
    (L.DEGRADED, T.GRACE_EXPIRED): L.DOWN,
    **{(state, T.FATAL): L.DOWN for state in (L.UNKNOWN, *_LIVE)},
    **{(state, T.DISABLE): L.DOWN
       for state in (L.UNKNOWN, *_LIVE, L.DOWN, L.FAILED, L.QUARANTINED)},
    (L.DOWN, T.ENABLE): L.READY,
    (L.DOWN, T.PARTITION_HEALED): L.READY,
    **{(state, T.TERMINATE): L.TERMINATED for state in Lifecycle if state is not L.TERMINATED},
    **{(state, T.WIPE): L.BOOTING
       for state in (L.READY, L.DEGRADED, L.DOWN, L.FAILED, L.QUARANTINED, L.BOOTING)},
    (L.BOOTING, T.WIPE_PASSED): L.READY,
    **{(state, T.WIPE_FAILED): L.QUARANTINED for state in (*_LIVE, L.DOWN)},
    **{(state, T.QUARANTINE): L.QUARANTINED for state in (*_LIVE, L.DOWN, L.FAILED)},
}

INTENT: dict[tuple[Intent, IntentTrigger], Intent] = {
    (I.ELIGIBLE, IntentTrigger.CORDON): I.CORDONED,
    (I.CORDONED, IntentTrigger.UNCORDON): I.ELIGIBLE,
    (I.ELIGIBLE, IntentTrigger.DRAIN): I.DRAINING,
    (I.CORDONED, IntentTrigger.DRAIN): I.DRAINING,
    (I.DRAINING, IntentTrigger.DRAIN_COMPLETE): I.DRAINED,
    (I.DRAINING, IntentTrigger.UNDRAIN): I.ELIGIBLE,
    (I.DRAINED, IntentTrigger.UNDRAIN): I.ELIGIBLE,
    **{(intent, IntentTrigger.DISABLE): I.DISABLED
       for intent in (I.ELIGIBLE, I.CORDONED, I.DRAINING, I.DRAINED)},
    (I.DISABLED, IntentTrigger.ENABLE): I.ELIGIBLE,
}


def next_lifecycle(current: Lifecycle, trigger: LifecycleTrigger) -> Lifecycle | None:
    """The lifecycle after ``trigger``, or None when the table refuses it."""
    return LIFECYCLE.get((current, trigger))


def next_intent(current: Intent, command: IntentTrigger) -> Intent | None:
    """The intent after ``command``, or None when the table refuses it."""
    return INTENT.get((current, command))


def lifecycle_table_markdown() -> str:
    """The lifecycle transitions as docs/node-model.md shows them."""
    rows = ["| from | trigger | to |", "|---|---|---|"]
    rows += [f"| {src.value} | {trig.value} | {dst.value} |"
             for (src, trig), dst in LIFECYCLE.items()]
    return "\n".join(rows)


def intent_table_markdown() -> str:
    rows = ["| from | command | to |", "|---|---|---|"]
    rows += [f"| {src.value} | {cmd.value} | {dst.value} |" for (src, cmd), dst in INTENT.items()]
    return "\n".join(rows)
