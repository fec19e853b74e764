"""Issue 26 item 4: a node event chained past the refused messages before it, onto the
node's last vouched event (``events.chain_anchor``), keeps that event anchored: changed
or removed, the chain breaks, wherever refused messages sit. A real nats-server; the
events stream copied with deletes allowed stands for a store tampered with on disk."""

from __future__ import annotations

import hashlib
from typing import Any

import nats
import pytest
from msgspec.structs import replace

from herdbook.events.chain_anchor import chain_anchor
from herdbook.events.codec import encode
from herdbook.events.node import NodeApproved, NodeCordoned, NodeEvent, NodeRegistered
from herdbook.events.store import EventStore
from herdbook.events.streams import events_stream
from herdbook.events.subjects import EVENTS_STREAM, aggregate_filter
from herdbook.history.queries import verify

pytestmark = pytest.mark.timeout(60)

FILTER = aggregate_filter("node", "n1")


async def anchor(js: Any, **options: int) -> bytes | None:
    last = await js.get_last_msg(EVENTS_STREAM, FILTER)
    return await chain_anchor(js, EVENTS_STREAM, FILTER, int(last.seq), str(last.subject),
                              last.data or b"", **options)


async def chained_past(store: EventStore, js: Any, event: NodeEvent) -> int:
    """``event`` appended as a store that reads past refused messages appends it."""
    found = await anchor(js)
    prev = None if found is None else hashlib.sha256(found).hexdigest()
    return await store.append(replace(event, prev_hash=prev))


async def test_the_anchor_is_the_last_vouched_event_past_refused_ones(
        nats_server: Any) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        config = events_stream()
        config.deny_delete = False
        await js.add_stream(config)
        store = EventStore(nc)
        refused = int((await js.publish("herd.node.n1.info_updated", b"{")).seq)
        assert await anchor(js) is None          # only a refused message: a first event
        await store.append(NodeRegistered(node_id="n1", boot_id="b"))
        approved = await store.append(NodeApproved(node_id="n1", actor="alice"))
        approved_data = (await js.get_msg(EVENTS_STREAM, approved)).data
        for _ in range(200):   # another node's events widen the search past one window
            await js.publish("herd.node.n2.info_updated", b"{")
        forged = [int((await js.publish("herd.node.n1.registered",
                                        encode(NodeApproved(node_id="n1")))).seq),
                  int((await js.publish("herd.node.n1.boot_started", b"[" * 50_000)).seq)]
        assert await anchor(js) == approved_data
        assert await anchor(js, max_past=1) == b"[" * 50_000   # past the bound: the last

        cordoned = await chained_past(store, js, NodeCordoned(node_id="n1", actor="bob"))
        intact = await verify(js, "n1")
        assert (intact["ok"], intact["unanchored"], intact["refused_total"]) == (
            True, [], 1 + len(forged))
        assert refused < approved < forged[0] < cordoned

        await js.delete_msg(EVENTS_STREAM, forged[1])   # a refused message: no break
        assert (await verify(js, "n1"))["ok"] is True
        await js.delete_msg(EVENTS_STREAM, approved)    # the vouched event before them
        gone = await verify(js, "n1")
        assert [(b["seq"], b["event"]) for b in gone["broken"]] == [
            (cordoned, "node.cordoned")]
        assert gone["broken"][0]["found"] == hashlib.sha256(approved_data).hexdigest()
    finally:
        await nc.close()
