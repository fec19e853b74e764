"""`herd node <command>` over many nodes, through typer's CliRunner against a hand-written
fake of the control plane's API (no NATS): the selection, one line per node, the
summary, one confirmation, the exit codes; and a denied request failing at once."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from herdbook.cli import client, node_args
from herdbook.cli.main import app

NODES = [
    {"id": "cp-1", "type": "requester", "labels": {}},
    {"id": "gpu-1", "type": "compute", "labels": {"rack": "r1"}},
    {"id": "gpu-2", "type": "compute", "labels": {"rack": "r1", "zone": "a"}},
    {"id": "gpu-3", "type": "compute", "labels": {"rack": "r2"}},
]


def summary(node: dict[str, Any]) -> dict[str, Any]:
    return {**node, "class": "standard", "approval": "APPROVED", "lifecycle": "READY",
            "health": "HEALTHY", "intent": "ELIGIBLE", "state": "READY", "schedulable": True,
            "pool": None, "last_heartbeat": None, "heartbeat_age": None, "heartbeating": True,
            "allocations": 0, "gpus": 8, "fingerprint_group": None, "claimed_by": None}


EVENTS = {"node.approve": "node.approved", "node.cordon": "node.cordoned",
          "node.uncordon": "node.uncordoned", "node.disable": "node.disabled",
          "node.drain": "node.drain_started"}


class Msg:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()


class FakeApi:
    """The API as the CLI sees it over NATS: `node.list` in pages of two (label filter
    applied), node commands answered or refused by id."""

    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.refuse = refuse
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def request(self, subject: str, data: bytes, timeout: float) -> Msg:
        route = subject.removeprefix("herd.api.v1.")
        body = json.loads(data)
        self.sent.append((route, body))
        if route == "node.list":
            found = [summary(n) for n in NODES
                     if body.get("labels", {}).items() <= n["labels"].items()]
            start = int(body.get("next_token") or 0)
            token = str(start + 2) if start + 2 < len(found) else None
            return Msg({"ok": True, "result": {"items": found[start:start + 2],
                                               "next_token": token}})
        if body["id"] in self.refuse:
            return Msg({"ok": False, "code": "refused", "error": f"{body['id']} says no"})
        return Msg({"ok": True, "result": {"event": EVENTS[route], "event_id": "e",
                                           "seq": 1, "node": None}})

    async def close(self) -> None:
        return None

    def commands(self) -> list[str]:
        return [body["id"] for route, body in self.sent if route != "node.list"]


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = FakeApi(refuse=frozenset({"gpu-2"}))

    async def connect(server: str) -> FakeApi:
        return fake

    monkeypatch.setattr(client, "connect", connect)
    return fake


def herd(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=stdin,
                              env={"HERD_SERVER": None, "HERD_CREDS": None})


def test_a_selection_acts_on_every_matching_compute_node_and_reports_each(api: FakeApi) -> None:
    result = herd("node", "cordon", "-l", "rack=r1", "-m", "pdu")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "gpu-1: cordoned", "gpu-2: refused: gpu-2 says no", "cordon: 1 of 2 nodes done, 1 refused"]
    assert api.commands() == ["gpu-1", "gpu-2"]
    assert [body["reason"] for route, body in api.sent if route == "node.cordon"] == ["pdu"] * 2
    # the whole fleet across pages, without the control plane's requester node
    api.sent.clear()
    every = herd("node", "uncordon", "--filter-state", "ready")
    assert every.stdout.splitlines()[-1] == "uncordon: 2 of 3 nodes done, 1 refused"
    assert api.commands() == ["gpu-1", "gpu-2", "gpu-3"]
    assert sum(route == "node.list" for route, _ in api.sent) == 2  # two pages


def test_several_ids_deduplicated_in_order_and_all_done_exit_0(api: FakeApi) -> None:
    result = herd("node", "approve", "gpu-3", "gpu-1", "gpu-3")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["gpu-3: approved", "gpu-1: approved",
                                          "approve: 2 of 2 nodes done"]
    assert api.commands() == ["gpu-3", "gpu-1"]
    assert not any(route == "node.list" for route, _ in api.sent)


def test_one_id_keeps_the_one_node_output(api: FakeApi) -> None:
    result = herd("node", "cordon", "gpu-1")
    assert (result.exit_code, result.stdout) == (0, "Ok\n")
    refused = herd("node", "cordon", "gpu-2")
    assert (refused.exit_code, refused.stdout) == (1, "")
    assert refused.stderr == "Error: gpu-2 says no\n"


def test_bad_selections_are_usage_errors_and_send_nothing(api: FakeApi) -> None:
    for args, says in ((["node", "cordon"], "give one or more node ids"),
                       (["node", "cordon", "gpu-1", "-l", "rack=r1"], "not both"),
                       (["node", "cordon", "-l", ""], "-l/--selector is empty"),
                       (["node", "cordon", "-l", "rack"], "invalid label"),
                       (["node", "cordon", "--filter-state", "sleepy"], "unknown state"),
                       (["node", "approve", "--filter-approval", "maybe"], "unknown approval"),
                       (["node", "cordon", "a b", "gpu-1"], "node id")):
        result = herd(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.count("\n") == 1 and says in result.stderr, (args, result.stderr)
    assert api.sent == []
    nothing = herd("node", "cordon", "-l", "rack=r9", "--filter-state", "ready")
    assert nothing.exit_code == 2
    assert nothing.stderr == "Error: no node matches -l rack=r9 --filter-state ready\n"
    assert api.commands() == []


def test_disable_asks_once_for_all_nodes(api: FakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    no_tty = herd("node", "disable", "-l", "rack=r1")
    assert no_tty.exit_code == 2
    assert no_tty.stderr == ("Error: Disable 2 nodes (gpu-1, gpu-2)? They go DOWN now and "
                             "their allocations are requeued. needs confirmation: pass --yes\n")
    assert api.commands() == []
    monkeypatch.setattr(node_args, "interactive", lambda: True)  # someone at a terminal
    declined = herd("node", "disable", "gpu-1", "gpu-3", stdin="n\n")
    assert declined.exit_code == 1 and api.commands() == []
    asked = herd("node", "disable", "gpu-1", "gpu-3", stdin="y\n")
    assert asked.exit_code == 0, asked.output
    assert asked.stdout.count("Disable 2 nodes (gpu-1, gpu-3)?") == 1
    assert api.commands() == ["gpu-1", "gpu-3"]
    assert herd("node", "disable", "gpu-1", "--yes").stdout == "Ok\n"


def test_drain_carries_its_options_to_every_node(api: FakeApi) -> None:
    result = herd("node", "drain", "-l", "rack=r2", "--deadline", "30m")
    assert result.stdout.splitlines() == ["gpu-3: drain started", "drain: 1 of 1 nodes done"]
    drains = [body for route, body in api.sent if route == "node.drain"]
    assert drains[0]["deadline_s"] == 1800.0 and drains[0]["urgent"] is False


class SilentNats:
    """A connection on which NATS drops the request: no reply ever comes."""

    def __init__(self) -> None:
        self.session = client.Session(None)
        self.watch = self.session.watch

    async def request(self, subject: str, data: bytes, timeout: float) -> Any:
        await asyncio.sleep(timeout)
        raise AssertionError("no permission error arrived")


async def test_a_denied_request_fails_at_once_with_the_subject() -> None:
    nc = SilentNats()
    client._sessions[nc] = nc.session
    violation = Exception('nats: Permissions Violation for Publish to "herd.api.v1.status"')
    other = Exception('nats: Permissions Violation for Publish to "herd.hb.x"')

    async def report() -> None:
        await asyncio.sleep(0.05)
        await nc.watch.on_error(other)  # not this request's subject: it waits on
        await asyncio.sleep(0.05)
        await nc.watch.on_error(violation)

    started = time.monotonic()
    reporter = asyncio.create_task(report())
    with pytest.raises(client.RequestFailed) as raised:
        await client.attempt(nc, "status", {}, timeout=10)
    await reporter
    assert time.monotonic() - started < 1
    assert (raised.value.message, raised.value.code, raised.value.answered) == (
        "permission denied: herd.api.v1.status", client.EXIT_REFUSED, False)
    # the next request to the same subject is refused without waiting
    with pytest.raises(client.RequestFailed):
        await asyncio.wait_for(client.attempt(nc, "status", {}, timeout=10), 1)
