"""Per-GPU telemetry is one family of the subject table (issue 27 item 2): ``herd.gpu.<id>``
in HERD_HEARTBEATS, published by that node's agent only (its NATS permissions follow
from the table), and bound by ``authority.bind_telemetry``: a body naming another node,
or of another type, is refused."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from herdbook.agent.fake_nvml import FakeNvml
from herdbook.agent.telemetry_sampler import sample
from herdbook.events.authority import (
    FAMILIES,
    Publisher,
    Unvouched,
    agent_publish_subjects,
    bind_telemetry,
    family_of,
    publishers,
)
from herdbook.events.codec import encode
from herdbook.events.health_report import HealthReport
from herdbook.events.heartbeat import Heartbeat, NodeResources
from herdbook.events.node import NodeApproved
from herdbook.events.streams import events_stream, heartbeats_stream
from herdbook.events.subjects import HEARTBEATS_STREAM, telemetry_subject
from herdbook.events.telemetry import GpuReading, GpuTelemetry
from herdbook.natsd.users import agent_permissions, operator_permissions
from tests.unit.test_credentials import allowed


def telemetry(node: str = "n1", **changes: object) -> GpuTelemetry:
    t = sample(FakeNvml(count=2, seed=node), node, "b1", 0.0, hostname="h")
    return GpuTelemetry(**{**{f: getattr(t, f) for f in t.__struct_fields__}, **changes})


def test_the_gpu_family_is_in_the_heartbeat_stream_and_agent_writable() -> None:
    family = family_of("herd.gpu.n1")
    assert family is not None and family in FAMILIES
    assert (family.stream, family.id_tokens, family.base) == (HEARTBEATS_STREAM, ("node_id",),
                                                              GpuTelemetry)
    assert not family.carries_events
    assert publishers(GpuTelemetry) == {Publisher.AGENT, Publisher.CONTROL}
    assert "herd.gpu.n1" in agent_publish_subjects("n1")
    assert "herd.gpu.*" in heartbeats_stream().subjects
    assert not any(s.startswith("herd.gpu") for s in events_stream().subjects or [])


def test_an_agent_publishes_only_its_own_telemetry_and_operators_may_read_it() -> None:
    perms = agent_permissions("gpu-1")
    assert allowed(perms, "publish", "herd.gpu.gpu-1")
    for subject in ("herd.gpu.other", "herd.gpu.gpu-1x", "herd.gpu.*", "herd.gpu.gpu-1.x"):
        assert not allowed(perms, "publish", subject), subject
    assert not allowed(perms, "subscribe", "herd.gpu.other")
    assert allowed(operator_permissions("op-alice"), "subscribe", "herd.gpu.gpu-1")


def test_telemetry_on_its_own_subject_binds() -> None:
    t = telemetry()
    assert bind_telemetry(telemetry_subject("n1"), encode(t)) == t


@pytest.mark.parametrize(("subject", "body", "reason"), [
    # a body naming another node, on the subject n1's agent may publish
    ("herd.gpu.n1", encode(telemetry("n2")), "names node 'n2'"),
    # bodies of another type on it
    ("herd.gpu.n1", encode(Heartbeat(node_id="n1", boot_id="b1", seq=1)), "no GPU"),
    ("herd.gpu.n1", encode(NodeResources(node_id="n1", cpus=8)), "missing required field `boot_id`"),
    ("herd.gpu.n1", encode(HealthReport(report_id="r", node_id="n1", boot_id="b1",
                                        sent_at=0.0)), "no GPU"),
    ("herd.gpu.n1", encode(NodeApproved(node_id="n1")), "missing required field `boot_id`"),
    # telemetry on another family's subject
    ("herd.hb.n1", encode(telemetry()), "carries no GPU telemetry"),
    ("herd.node.n1.registered", encode(telemetry()), "carries no GPU telemetry"),
    # nonsense inside
    ("herd.gpu.n1", encode(telemetry(boot_id="")), "no boot id"),
    ("herd.gpu.n1", encode(telemetry(boot_id="b\x1b[31m")), "invalid boot id"),
    ("herd.gpu.n1", encode(telemetry(gpus=(GpuReading(index=0), GpuReading(index=0)))),
     "not distinct"),
    ("herd.gpu.n1", encode(telemetry(gpus=(GpuReading(index=-1),))), "not distinct"),
    ("herd.gpu.n\x1b1", encode(telemetry("n\x1b1")), "invalid node id"),
    ("herd.gpu.n1", b"[" * 50_000 + b"]" * 50_000, "undecodable"),
    ("herd.gpu.n1", b'{"node_id":"n1","boot_id":"b1","gpus":[{"index":"zero"}]}', "undecodable"),
])
def test_a_body_its_subject_does_not_vouch_for_is_refused(subject: str, body: bytes,
                                                           reason: str) -> None:
    with pytest.raises(Unvouched, match=reason.replace("[", r"\[")):
        bind_telemetry(subject, body)


@given(st.binary(max_size=2000) | st.text(max_size=500).map(str.encode)
       | st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                      lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.sampled_from(["node_id", "boot_id", "gpus", "index",
                                                         "uuid", "temperature_c", "x"]),
                                        inner, max_size=5),
                      max_leaves=20).map(msgspec.json.encode))
def test_any_body_binds_or_is_refused_never_raises_anything_else(body: bytes) -> None:
    try:
        bound = bind_telemetry("herd.gpu.n1", body)
    except Unvouched:
        return
    assert bound.node_id == "n1" and bound.gpus
