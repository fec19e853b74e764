"""Hostile API requests: random payloads to every endpoint of a real control plane get an
error reply (or a result), never a crash; the API keeps answering."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap

PAYLOADS: list[bytes] = [
    b"", b"{", b"null", b"[]", b'"x"', b"42", b"\xff\xfe\x00", b'{"id": null}',
    b'{"id": "../../etc"}', b'{"id": "' + b"a" * 5000 + b'"}', b'{"id": 7, "wide": "yes"}',
    b'{"spec": {"id": "x", "command": "rm -rf /", "count": -1}}', b'{"limit": -5}',
    b'{"filter_state": ["NOPE"]}', b'{"status": ["sleepy"]}', b'{"at": "yesterday-ish"}',
    b'{"id": "n1", "deadline_s": "soon"}', b'{"unknown_field": 1}',
]


async def test_every_endpoint_survives_hostile_payloads(nats_server: Any, nc: Any,
                                                        tmp_path: Path) -> None:
    plane = bootstrap(parse_config(f"nats: {{url: '{nats_server.url}'}}\n"
                                   f"data_dir: '{tmp_path / 'd'}'\nnode_id: cp-fuzz\n"),
                      clock=SYSTEM_CLOCK)
    await plane.start()
    try:
        info = json.loads((await nc.request("$SRV.INFO.herd-api", b"", timeout=5)).data)
        subjects = sorted(e["subject"] for e in info["endpoints"])
        assert len(subjects) > 30
        rng = random.Random(7)
        payloads = PAYLOADS + [rng.randbytes(rng.randrange(1, 200)) for _ in range(10)]
        for subject in subjects:
            if subject.endswith("view.rebuild"):
                continue   # valid with any payload, and slow: not a decoder
            for payload in payloads:
                reply = json.loads((await nc.request(subject, payload, timeout=10)).data)
                assert isinstance(reply, dict) and "ok" in reply, (subject, payload)
                if not reply["ok"]:
                    assert reply["code"] != "internal", (subject, payload, reply)
        status = json.loads((await nc.request("herd.api.v1.status", b"{}", timeout=5)).data)
        assert status["ok"] and status["result"]["nodes"] >= 1
    finally:
        await plane.stop()


async def test_undecodable_stream_messages_go_to_the_dead_letter_subject(
        nats_server: Any, nc: Any, tmp_path: Path) -> None:
    import asyncio

    plane = bootstrap(parse_config(f"nats: {{url: '{nats_server.url}'}}\n"
                                   f"data_dir: '{tmp_path / 'd'}'\nnode_id: cp-dead\n"),
                      clock=SYSTEM_CLOCK)
    await plane.start()
    got: list[Any] = []

    async def on_dead(msg: Any) -> None:
        got.append(msg)

    sub = await nc.subscribe("herd.deadletter.>", cb=on_dead)
    try:
        assert plane.projector is not None and plane.sweeper is not None
        js = nc.jetstream()
        ack = await js.publish("herd.node.gpu-1.registered", b'{"type": "node.registered"}')
        await nc.publish("herd.hb.gpu-1", b"\x00not a heartbeat")
        await plane.projector.wait_applied(ack.seq)
        for _ in range(50):
            if len(got) >= 2:
                break
            await asyncio.sleep(0.1)
        subjects = sorted(m.subject for m in got)
        assert subjects == ["herd.deadletter.HERD_EVENTS", "herd.deadletter.HERD_HEARTBEATS"]
        events = next(m for m in got if m.subject.endswith("HERD_EVENTS"))
        assert events.headers["Herd-Stream-Seq"] == str(ack.seq)
        assert plane.projector.deadletters == 1 and plane.projector.failed is None
        status = json.loads((await nc.request("herd.api.v1.status", b"{}", timeout=5)).data)
        assert status["result"]["deadletters"] == 1
    finally:
        await sub.unsubscribe()
        await plane.stop()
