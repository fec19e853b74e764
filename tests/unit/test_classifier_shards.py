"""The health classifier shards by node with liveness (issue 32 item 1): with S > 1 shards
a replica classifies only the reports of the nodes whose shard it holds. Of the others it
keeps the reports that matter (events, a check not healthy), their events in its fault
history at once, and classifies them when it takes the shard (a takeover): a fatal XID
that arrived while nobody held the shard is still acted on, exactly once, and kept
events are counted once in the history."""

from __future__ import annotations

import msgspec
from nats.aio.msg import Msg

from herdbook.control.shards import ShardWork
from herdbook.events.codec import encode
from herdbook.events.hb_shards import shard_of
from herdbook.events.health_report import GpuEvent, HealthReport, NodeHealthChanged
from herdbook.events.node import NodeDown
from herdbook.events.states import Health, Lifecycle
from tests.unit.test_classifier import World, fatal, healthy

SHARDS = 2
SHARD = shard_of("n1", SHARDS)


def message(report: HealthReport, seq: int) -> Msg:
    """A report as the classifier's HERD_HEALTH feed hands it over."""
    return Msg(_client=None,  # type: ignore[arg-type]
               subject=f"herd.health.{report.node_id}", data=encode(report),
               reply=f"$JS.ACK.HERD_HEALTH.c.1.{seq}.{seq}.1700000000000000000.0")


def xid13(report_id: str) -> HealthReport:
    return HealthReport(report_id=report_id, node_id="n1", boot_id="b",
                        events=(GpuEvent(kind="xid", xid=13, gpu=0),))


def sharded(world: World) -> World:
    world.classifier.shard(SHARDS)
    return world


async def test_only_the_replica_holding_the_nodes_shard_classifies_its_reports() -> None:
    holder = sharded(World())
    holder.ready()
    other = sharded(holder.again({}))
    await holder.classifier.take(SHARD)
    await other.classifier.take(1 - SHARD)
    before = len(holder.store.appended)
    await other.classifier._on_report(message(fatal("r-79"), 3))
    assert len(holder.store.appended) == before          # not its shard: nothing decided
    await holder.classifier._on_report(message(fatal("r-79"), 3))
    assert [type(e) for e in holder.appended()[before:]] == [NodeHealthChanged, NodeDown]


async def test_a_fatal_report_nobody_classified_is_acted_on_by_the_next_holder() -> None:
    world = sharded(World())
    world.ready()
    await world.classifier._on_report(message(healthy("r-1"), 2))   # not kept: says nothing
    await world.classifier._on_report(message(fatal("r-79"), 3))    # the holder was gone
    assert world.appended() == []
    await world.classifier.take(SHARD)
    changed, down = world.appended()
    assert isinstance(changed, NodeHealthChanged) and changed.causation_id == "r-79"
    assert isinstance(down, NodeDown)
    assert world.projector.nodes["n1"].lifecycle is Lifecycle.DOWN
    await world.classifier.release(SHARD)
    await ShardWork(world.classifier).take(SHARD)                   # again: nothing kept
    assert len(world.appended()) == 2


async def test_kept_events_count_once_in_the_history() -> None:
    """Two XID 13s kept, then classified on takeover: recoverable (DEGRADED), not the
    critical ``repeated-xid`` that counting each one twice (4 >= 3) would make it."""
    world = sharded(World())
    world.ready()
    for seq in (2, 3):
        await world.classifier._on_report(message(xid13(f"r-{seq}"), seq))
    assert world.classifier.history.of("n1", {}, world.clock.monotonic()).xid_count(
        0, 13, 86400.0) == 2
    await world.classifier.take(SHARD)
    changed = world.appended()[-1]
    assert isinstance(changed, NodeHealthChanged) and changed.health is Health.DEGRADED
    assert msgspec.to_builtins(changed)["level"] != "critical"
