"""Answers agents' catch-up requests (``herd.sync.<node>.allocs``, see ``events.sync``)
with that node's allocation events after a sequence, read from HERD_EVENTS with one
batched direct get. Every control-plane replica answers (queue group ``herd-sync``).

The node is the one the subject names; an id that is not valid gets no answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from herdbook.events.authority import Unvouched, bind_event
from herdbook.events.subjects import EVENTS_STREAM, ID_PATTERN, aggregate_filter
from herdbook.events.sync import SyncedEvent, SyncReply, sync_request_decoder

log = logging.getLogger(__name__)

QUEUE_GROUP = "herd-sync"
SUBJECT = "herd.sync.*.allocs"
BATCH = 500
MAX_BYTES = 600_000     # the reply stays under NATS's default 1 MB max_payload
_encoder = msgspec.json.Encoder()


class AgentSync:
    def __init__(self, nc: NATS, stream: str = EVENTS_STREAM, *, batch: int = BATCH,
                 timeout: float = 5.0) -> None:
        self.nc = nc
        self.stream = stream
        self.batch = batch
        self.timeout = timeout
        self.served = 0
        self._sub: Any = None

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(SUBJECT, queue=QUEUE_GROUP, cb=self._on_request)

    async def stop(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:  # noqa: BLE001 - the connection may be gone
                pass
            self._sub = None

    async def _on_request(self, msg: Msg) -> None:
        node_id = msg.subject.split(".")[2]
        if not msg.reply or not ID_PATTERN.fullmatch(node_id):
            return
        try:
            request = sync_request_decoder.decode(msg.data or b"{}")
            reply = await self.read(node_id, request.after)
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            reply = SyncReply(error=f"bad request: {err}")
        except Exception as err:  # noqa: BLE001 - the agent asks again
            log.warning("catch-up read for %s failed: %r", node_id, err)
            reply = SyncReply(error=f"cannot read the stream now: {err}")
        self.served += 1
        try:
            await msg.respond(_encoder.encode(reply))
        except Exception as err:  # noqa: BLE001 - the agent asks again
            log.debug("cannot answer %s: %s", msg.subject, err)

    async def read(self, node_id: str, after: int) -> SyncReply:
        """Up to ``batch`` events of ``herd.alloc.<node_id>.>`` after ``after`` that their
        subjects vouch for, the last sequence read, and whether more remain. One batched
        direct get (nats-server >= 2.11): the messages, then an end-of-batch status (204),
        or 404 when nothing matches."""
        inbox = self.nc.new_inbox()
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        events: list[SyncedEvent] = []
        last = [after]

        async def on_msg(reply: Msg) -> None:
            headers = reply.headers or {}
            status = headers.get("Status")
            if status is not None:
                if not done.done():
                    pending = int(headers.get("Nats-Num-Pending", "0") or 0)
                    done.set_result(status == "204" and pending > 0)
                return
            seq, subject, data = (int(headers["Nats-Sequence"]), headers["Nats-Subject"],
                                  reply.data)
            last[0] = max(last[0], seq)
            try:
                bind_event(subject, data)
            except Unvouched:
                return    # dead-lettered by the projector; never served
            events.append(SyncedEvent(seq=seq, subject=subject, data=msgspec.Raw(data)))

        sub = await self.nc.subscribe(inbox, cb=on_msg)
        try:
            body = {"seq": after + 1, "next_by_subj": aggregate_filter("alloc", node_id),
                    "batch": self.batch, "max_bytes": MAX_BYTES}
            await self.nc.publish(f"$JS.API.DIRECT.GET.{self.stream}", json.dumps(body).encode(),
                                  reply=inbox)
            more = await asyncio.wait_for(done, self.timeout)
        finally:
            await sub.unsubscribe()
        return SyncReply(events=events, last=last[0], more=more)
