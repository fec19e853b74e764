"""The sweeper per liveness shard, without NATS (the fakes and clock of
``test_sweeper_heap``): it declares only nodes of the shards it holds, and a shard taken
over is observed for one heartbeat timeout before anything in it is declared."""

from __future__ import annotations

from herdbook.config import parse_config
from herdbook.events.hb_shards import shard_of
from herdbook.events.heartbeat import Heartbeat
from tests.world import SweeperWorld

CONFIG = parse_config(b"lifecycle: {heartbeat_timeout: 30s, liveness_shards: 2}")
A, B = "node-1", "node-0"      # shard_of: 1 and 0 (checked below)


class World(SweeperWorld):
    def __init__(self) -> None:
        super().__init__(CONFIG)

    def take(self, shard: int, stored: dict[str, float] | None = None) -> None:
        """What ``Sweeper.take`` does, without NATS: the shard's heartbeats read (live,
        and ``stored``: node -> when its last stored heartbeat was sent, by the clock),
        then its nodes observed."""
        self.sweeper.intake.held[shard] = None
        for node_id, at in (stored or {}).items():
            self.sweeper.accept(Heartbeat(node_id=node_id, boot_id="b", seq=1), at)
        self.sweeper.observe_shard(shard)

    async def at(self, t: float) -> list[str]:  # type: ignore[override]
        await super().at(t)
        return [f"{e.event_name}:{e.node_id}"  # type: ignore[attr-defined]
                for e, _ in self.store.appended]


def test_the_nodes_fall_in_two_shards() -> None:
    assert (shard_of(A, 2), shard_of(B, 2)) == (1, 0)


async def test_only_the_nodes_of_held_shards_are_swept() -> None:
    world = World()
    world.take(shard_of(A, 2))
    world.ready(A)
    world.ready(B)
    assert await world.at(31) == [f"degraded:{A}"]   # B's shard is another replica's
    assert B not in world.sweeper.beats


async def test_a_shard_taken_over_is_observed_for_one_timeout_before_declaring() -> None:
    world = World()
    world.take(shard_of(A, 2))
    world.ready(A)
    world.ready(B)
    await world.at(100)
    # taken over at t=100; B's last stored heartbeat is from t=60: 40 s silent already
    world.take(shard_of(B, 2), stored={B: 60.0})
    assert f"degraded:{B}" not in await world.at(129.9)   # silent 129.9 s, watched 29.9 s
    assert (await world.at(130))[-1] == f"degraded:{B}"  # one heartbeat timeout later


async def test_a_shard_released_is_no_longer_swept() -> None:
    world = World()
    world.take(0)
    world.take(1)
    world.ready(A)
    world.ready(B)
    await world.sweeper.release(shard_of(B, 2))
    assert await world.at(31) == [f"degraded:{A}"]
    assert world.sweeper.held == [shard_of(A, 2)]
