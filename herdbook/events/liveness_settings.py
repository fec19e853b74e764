"""The control plane's liveness settings, published for agents (issue 16, "no silent
flapping"): the key ``liveness`` of the KV bucket ``herd_settings``, written by every
control-plane replica at start (``control/settings.py``) and read by agents with one
direct get (``agent/liveness.py``), which their credentials allow and nothing more.

An agent heartbeats every third of its class's ``heartbeat_timeout`` unless told
otherwise; an interval that leaves no room for one lost heartbeat is warned about, by
the agent at start and by ``herd node describe``.
"""

from __future__ import annotations

import msgspec

from herdbook.durations import format_duration
from herdbook.events.states import NodeClass

SETTINGS_BUCKET = "herd_settings"
SETTINGS_STREAM = f"KV_{SETTINGS_BUCKET}"
LIVENESS_KEY = "liveness"
LIVENESS_SUBJECT = f"$KV.{SETTINGS_BUCKET}.{LIVENESS_KEY}"
LIVENESS_READ = f"$JS.API.DIRECT.GET.{SETTINGS_STREAM}.{LIVENESS_SUBJECT}"
"""The one JetStream API subject an agent publishes to read them."""

FALLBACK_INTERVAL = 10.0
"""An agent's heartbeat interval while no control plane has published its settings:
a third of the default heartbeat_timeout (30s)."""


class LivenessSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What the sweeper uses, per node class (standard, sensitive, borrowed): silent for
    ``heartbeat_timeout`` is DEGRADED, for ``grace_period`` more DOWN."""

    heartbeat_timeout: dict[str, float]
    grace_period: dict[str, float]
    boot_timeout: float
    liveness_shards: int = 1
    """``lifecycle.liveness_shards``: where HERD_HEARTBEATS keeps a node's heartbeat
    (``events.hb_shards.stored_heartbeat_subject``), which the agent's fence reads."""

    def timeout(self, node_class: str) -> float | None:
        return self.heartbeat_timeout.get(node_class, self.heartbeat_timeout.get(NodeClass.STANDARD))


liveness_decoder = msgspec.json.Decoder(LivenessSettings)


def derived_interval(heartbeat_timeout: float) -> float:
    """The default heartbeat interval: a third of the timeout (two heartbeats may be lost
    before the node is DEGRADED)."""
    return heartbeat_timeout / 3


def interval_warning(interval: float, heartbeat_timeout: float) -> str | None:
    """Why ``interval`` cannot keep a node READY, or None. The rule: two intervals must
    fit in the timeout with room to spare (``2 * interval < timeout``), so that one lost
    or late heartbeat does not make the node DEGRADED."""
    every, timeout = format_duration(interval), format_duration(heartbeat_timeout)
    if interval >= heartbeat_timeout:
        return (f"heartbeat interval {every} is not shorter than the heartbeat timeout "
                f"{timeout}: the node turns DEGRADED between heartbeats; use at most "
                f"{format_duration(heartbeat_timeout / 3)}")
    if 2 * interval >= heartbeat_timeout:
        return (f"heartbeat interval {every} leaves no margin within the heartbeat timeout "
                f"{timeout}: one lost or late heartbeat turns the node DEGRADED; use less "
                f"than half the timeout, e.g. {format_duration(heartbeat_timeout / 3)}")
    return None
