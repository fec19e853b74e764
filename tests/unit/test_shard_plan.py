"""Liveness shard balancing (``control.shards.plan``), pure: replicas converge on a fair
share each, whatever order they tick in, and a replica gone frees its shards."""

from __future__ import annotations

import random

from herdbook.control.shards import ShardPlan, fair_share, plan, shard_key, shard_of_key


def test_a_lone_replica_takes_every_shard() -> None:
    assert plan(4, ["a"], "a", [], []) == ShardPlan(take=(0, 1, 2, 3))
    assert plan(4, [], "a", [], []) == ShardPlan(take=(0, 1, 2, 3))   # its claim not seen yet


def test_a_second_replica_makes_the_first_hand_back_its_extras() -> None:
    assert plan(4, ["a", "b"], "a", [0, 1, 2, 3], []) == ShardPlan(release=(3, 2))
    assert plan(4, ["a", "b"], "b", [], [0, 1]) == ShardPlan(take=(2, 3))
    assert plan(4, ["a", "b"], "b", [], [0, 1, 2, 3]) == ShardPlan()   # nothing free yet


def test_a_replica_gone_leaves_its_shards_to_the_other() -> None:
    assert plan(2, ["a"], "a", [0], []) == ShardPlan(take=(1,))


def test_fair_share_rounds_up() -> None:
    assert [fair_share(5, r) for r in (1, 2, 3, 5, 8)] == [5, 3, 2, 1, 1]
    assert fair_share(3, 0) == 3


def simulate(shards: int, replicas: list[str], seed: int, rounds: int = 30
             ) -> dict[str, set[int]]:
    """Replicas ticking in a random order against one lease table (create-if-absent)."""
    rng = random.Random(seed)
    owner: dict[int, str] = {}
    for _ in range(rounds):
        for me in rng.sample(replicas, len(replicas)):
            held = {k for k, o in owner.items() if o == me}
            taken = {k for k, o in owner.items() if o != me}
            step = plan(shards, replicas, me, held, taken)
            for k in step.release:
                del owner[k]
            for k in step.take:
                owner.setdefault(k, me)
    return {r: {k for k, o in owner.items() if o == r} for r in replicas}


def test_replicas_converge_on_a_fair_share_each() -> None:
    for seed in range(20):
        for shards, names in ((2, ["a", "b"]), (8, ["a", "b", "c"]), (5, ["x", "y"]),
                              (16, ["r1", "r2", "r3", "r4"])):
            held = simulate(shards, names, seed)
            assert set().union(*held.values()) == set(range(shards))   # every shard held
            assert sum(len(h) for h in held.values()) == shards          # by one each
            share = fair_share(shards, len(names))
            assert all(share - 1 <= len(h) <= share for h in held.values()), held


def test_shard_keys_round_trip_and_ignore_other_keys() -> None:
    assert shard_of_key(shard_key(7)) == 7
    assert shard_of_key("control") is None and shard_of_key("replica.a") is None
    assert shard_of_key("sweeper-x") is None
