"""`herd events tail` against a real nats-server: the newest 20 by default, -n, --since as
a sequence or a time, --follow, every -o format, and columns wide enough for any type."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import subprocess
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from herdbook.cli.events import parse_since, type_width
from tests.conftest import HERD, herd


async def append(nc: Any, node: str, kind: str, reason: str = "") -> int:
    body = {"type": f"node.{kind}", "at": datetime.now(UTC).isoformat(), "actor": "test",
            "node_id": node, "reason": reason}
    if kind == "conformance_changed":     # a body that lacks it is shown as refused
        body["fingerprint"] = "fp-1"
    ack = await nc.jetstream().publish(f"herd.node.{node}.{kind}", json.dumps(body).encode())
    return int(ack.seq)


async def tail(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    result = await asyncio.to_thread(herd, "events", "tail", *args, server=url)
    assert result.returncode == 0, result.stderr
    return result


def seqs(out: str) -> list[int]:
    return [json.loads(line)["seq"] for line in out.splitlines()]


async def test_tail_prints_the_newest_twenty_or_n(nc: Any, nats_server: Any) -> None:
    for i in range(30):
        await append(nc, "n1" if i % 10 else "n2", "cordoned")
    assert seqs((await tail(nats_server.url, "-o", "json")).stdout) == list(range(11, 31))
    assert seqs((await tail(nats_server.url, "-o", "json", "-n", "3")).stdout) == [28, 29, 30]
    assert (await tail(nats_server.url, "-n", "0", "-o", "json")).stdout == ""
    # a narrow filter: the newest of the few that match, however far back
    only = await tail(nats_server.url, "-o", "json", "--subject", "herd.node.n2.>", "-n", "2")
    assert seqs(only.stdout) == [11, 21]


async def test_since_takes_a_sequence_or_a_time(nc: Any, nats_server: Any) -> None:
    for _ in range(5):
        await append(nc, "n1", "cordoned")
    await asyncio.sleep(1.1)
    middle = datetime.now(UTC)
    for _ in range(25):
        await append(nc, "n1", "uncordoned")
    assert seqs((await tail(nats_server.url, "-o", "json", "--since", "4")).stdout) == \
        list(range(4, 31))
    assert seqs((await tail(nats_server.url, "-o", "json", "--since", "4", "-n", "2")
                 ).stdout) == [29, 30]
    at = middle.isoformat().replace("+00:00", "Z")
    assert seqs((await tail(nats_server.url, "-o", "json", "--since", at)).stdout) == \
        list(range(6, 31))
    assert seqs((await tail(nats_server.url, "-o", "json", "--since", "1h")).stdout) == \
        list(range(1, 31))
    assert (await tail(nats_server.url, "-o", "json", "--since", "99")).stdout == ""


def test_since_refuses_what_is_neither_a_sequence_nor_a_time() -> None:
    assert parse_since("42") == 42
    assert isinstance(parse_since("10m"), datetime)
    for bad in ("0", "-5", "yesterday"):
        result = herd("events", "tail", "--since", bad, server="nats://127.0.0.1:1")
        assert result.returncode == 2 and result.stderr.startswith("Error: --since"), bad
        assert len(result.stderr.strip().splitlines()) == 1


async def test_every_output_format_and_long_types_fit(nc: Any, nats_server: Any) -> None:
    await append(nc, "gpu-1", "conformance_changed", "fingerprint changed")
    await append(nc, "a-rather-long-node-name-0001", "down", "heartbeat timeout")
    url = nats_server.url
    docs = list(yaml.safe_load_all((await tail(url, "-o", "yaml")).stdout))
    assert [d["type"] for d in docs] == ["node.conformance_changed", "node.down"]
    rows = list(csv.DictReader(io.StringIO((await tail(url, "-o", "csv")).stdout)))
    assert [(r["seq"], r["type"], r["id"]) for r in rows] == [
        ("1", "node.conformance_changed", "gpu-1"), ("2", "node.down",
                                                     "a-rather-long-node-name-0001")]
    table = (await tail(url)).stdout.splitlines()
    assert table[0].split() == ["SEQ", "TIME", "TYPE", "ID", "ACTOR", "REASON"]
    assert "node.conformance_changed" in table[1]
    # every column starts at the same place on every line: nothing pushed out of line
    for column in ("ID", "ACTOR", "REASON"):
        start = table[0].index(column)
        assert all(line[start - 2:start] == "  " and line[start] != " " for line in table[1:])
    assert type_width() >= len("node.conformance_changed")


async def test_follow_prints_the_newest_then_new_events(nc: Any, nats_server: Any) -> None:
    await append(nc, "n1", "cordoned")
    proc = subprocess.Popen([*HERD, "--server", nats_server.url, "events", "tail", "-f",
                             "-o", "json"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 20)
        assert json.loads(first)["seq"] == 1
        await append(nc, "n1", "uncordoned")
        second = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 20)
        assert json.loads(second)["type"] == "node.uncordoned"
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.parametrize("fmt", ["xml", "JSON "])
def test_an_unknown_format_is_refused_in_one_line(fmt: str) -> None:
    result = herd("events", "tail", "-o", fmt, server="nats://127.0.0.1:1")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


async def test_nothing_to_show_prints_nothing(nc: Any, nats_server: Any) -> None:
    await append(nc, "n1", "cordoned")
    assert (await tail(nats_server.url, "--subject", "herd.node.nobody.>")).stdout == ""


async def test_a_sequence_reads_as_the_time_its_event_was_stored(nc: Any) -> None:
    """`herd audit list --since 1200`: the audit trail is kept by time."""
    from herdbook.cli.events import stored_at
    before = datetime.now(UTC)
    await append(nc, "n1", "cordoned")
    await asyncio.sleep(0.05)
    await append(nc, "n1", "uncordoned")
    first, second = await stored_at(nc, 1), await stored_at(nc, 2)
    assert before <= first < second
    assert await stored_at(nc, 99) >= second
