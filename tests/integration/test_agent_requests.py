"""Given a running agent with fake GPUs, when inject and fingerprint requests arrive on
its subjects, then the typed replies come back; a bad request gets ``ok`` false."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from herdbook.agent.main import Agent, AgentOptions
from herdbook.events.agent_requests import FingerprintReply, InjectReply, InjectRequest
from herdbook.events.subjects import fingerprint_subject, inject_subject
from herdbook.natsd.embedded import EmbeddedNats


async def test_inject_and_fingerprint_replies(nc, nats_server: EmbeddedNats,  # type: ignore[no-untyped-def]
                                              tmp_path: Path) -> None:
    agent = Agent(AgentOptions(server=nats_server.url, node_id="gpu-1",
                               state_dir=str(tmp_path / "a"), fake_gpus=2))
    task = asyncio.create_task(agent.run())
    try:
        await asyncio.wait_for(agent.registered.wait(), 10)
        await asyncio.sleep(0.2)   # the subscriptions follow the registration

        async def inject(body: bytes) -> InjectReply:
            msg = await nc.request(inject_subject("gpu-1"), body, timeout=10)
            return msgspec.json.decode(msg.data, type=InjectReply)

        done = await inject(msgspec.json.encode(InjectRequest(fault="xid", gpu=1, value=79)))
        assert done.ok and done.result == "XID 79 on GPU 1" and not done.error
        for body, error in [(b'{"fault": "meltdown"}', "fault: Invalid enum value"),
                            (b'{"fault": "xid", "gpu": 5, "value": 1}', "no GPU 5"),
                            (b"{", "truncated")]:
            refused = await inject(body)
            assert not refused.ok and error in refused.error, refused
        msg = await nc.request(fingerprint_subject("gpu-1"), b"{}", timeout=10)
        reply = msgspec.json.decode(msg.data, type=FingerprintReply)
        assert reply.ok and reply.fingerprint == agent.fingerprint != ""
        msg = await nc.request(fingerprint_subject("gpu-1"), b'{"x": 1}', timeout=10)
        assert not msgspec.json.decode(msg.data, type=FingerprintReply).ok
    finally:
        await agent.stop()
        await task
