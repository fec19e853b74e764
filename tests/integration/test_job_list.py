"""`job.list` on a real nats-server with a real control plane in-process: every job by id
with its allocations counted by status, the status filter and a bad status refused, over
NATS, over HTTP (`GET /v1/jobs`) and through the real `herd job list`.

Given a node made schedulable by its events (no agent: allocation facts are appended as
an agent would), three jobs: one running with allocations in two statuses, one stopped
after its allocation completed, one that fits nowhere (no allocations)."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.plane import ControlPlane
from herdbook.events.agent_requests import LogsReply, LogsRequest
from herdbook.events.alloc import AllocCompleted, AllocFailed, AllocRunning, AllocStatus
from herdbook.events.store import EventStore
from herdbook.events.subjects import logs_subject
from tests.conftest import free_port, herd, poll
from tests.integration.test_scheduler import add_ready_node

CONFIG = """
nats: {{url: '{url}'}}
data_dir: '{data}'
node_id: cp-jobs
http: {{port: {http_port}, host: '127.0.0.1'}}
lifecycle:
  heartbeat_timeout: 1h
"""


def spec(job_id: str, count: int, gpus: int) -> dict[str, Any]:
    return {"id": job_id, "count": count, "command": ["true"],
            "resources": {"cpu": 0.1, "memory_mb": 0, "gpus": gpus},
            "requeue": {"policy": "never"}}


class World:
    def __init__(self, plane: ControlPlane, nc: Any, url: str) -> None:
        self.plane = plane
        self.nc = nc
        self.url = url
        self.store = EventStore(nc)

    @property
    def projector(self) -> Any:
        return self.plane.projector

    async def call(self, route: str, **body: Any) -> dict[str, Any]:
        msg = await self.nc.request(f"herd.api.v1.{route}", json.dumps(body).encode(),
                                    timeout=10)
        return dict(json.loads(msg.data))

    async def until(self, predicate: Callable[[], Any], what: str,
                    timeout: float = 20.0) -> Any:
        return await poll(predicate, timeout, what)

    async def add_node(self, node_id: str, gpus: int) -> None:
        await add_ready_node(self.store, self.projector, node_id, gpus)

    def allocs(self, job_id: str) -> list[Any]:
        return sorted((a for a in self.projector.allocs.values() if a.job_id == job_id),
                      key=lambda a: a.index)

    async def report(self, *events: Any) -> None:
        """What the node's agent appends as its workloads start and end."""
        seq = 0
        for event in events:
            seq = await self.store.append(event)
        await self.projector.wait_applied(seq)


@pytest.fixture
async def world(nats_server: Any, nc: Any, tmp_path: Path) -> AsyncIterator[World]:
    http_port = free_port()
    plane = bootstrap(parse_config(CONFIG.format(url=nats_server.url, data=tmp_path / "cp",
                                                 http_port=http_port)), clock=SYSTEM_CLOCK)
    await plane.start()
    try:
        w = World(plane, nc, nats_server.url)
        await w.add_node("gpu-1", gpus=4)
        for job in (spec("train", 3, 1), spec("etl", 1, 1), spec("huge", 1, 8)):
            reply = await w.call("job.register", spec=job)
            assert reply["ok"], reply
        await w.until(lambda: len(w.allocs("train")) == 3 and len(w.allocs("etl")) == 1,
                      "train's and etl's allocations placed")
        a0, a1, a2 = w.allocs("train")
        [e0] = w.allocs("etl")
        await w.report(AllocRunning(node_id="gpu-1", alloc_id=a0.id, pid=11),
                       AllocRunning(node_id="gpu-1", alloc_id=a1.id, pid=12),
                       AllocFailed(node_id="gpu-1", alloc_id=a2.id, exit_code=1, reason="oom"),
                       AllocCompleted(node_id="gpu-1", alloc_id=e0.id, exit_code=0))
        stopped = await w.call("job.stop", id="etl", reason="done")
        assert stopped["ok"], stopped
        await w.until(lambda: w.projector.jobs["etl"].status == "dead", "etl stopped")
        assert [a.status for a in w.allocs("etl")] == [AllocStatus.COMPLETE]
        yield w
    finally:
        await plane.stop()


TRAIN = {"id": "train", "status": "running", "version": 1, "count": 3, "priority": 50,
         "allocations": {"failed": 1, "running": 2}, "phase": "running"}
ETL = {"id": "etl", "status": "dead", "version": 1, "count": 1, "priority": 50,
       "allocations": {"complete": 1}, "phase": "dead"}
HUGE = {"id": "huge", "status": "running", "version": 1, "count": 1, "priority": 50,
        "allocations": {}, "phase": "blocked"}


async def test_every_job_by_id_with_its_allocations_counted_as_job_status_counts_them(
        world: World) -> None:
    reply = await world.call("job.list")
    assert reply["ok"], reply
    assert reply["result"]["items"] == [ETL, HUGE, TRAIN]
    for item in reply["result"]["items"]:
        status = await world.call("job.status", id=item["id"])
        assert status["result"]["allocations"] == item["allocations"], item["id"]


async def test_the_status_filter_and_a_bad_status_refused_in_one_line(world: World) -> None:
    dead = await world.call("job.list", status=["dead"])
    assert [j["id"] for j in dead["result"]["items"]] == ["etl"]
    running = await world.call("job.list", status=["RUNNING"])
    assert [j["id"] for j in running["result"]["items"]] == ["huge", "train"]
    both = await world.call("job.list", status=["running", "dead"])
    assert [j["id"] for j in both["result"]["items"]] == ["etl", "huge", "train"]
    bad = await world.call("job.list", status=["sideways"])
    assert (bad["ok"], bad["code"]) == (False, "bad_request")
    assert bad["error"] == "Invalid enum value 'sideways' - at `$.status[0]`"   # the document's enum
    unknown_field = await world.call("job.list", job_id="train")
    assert unknown_field["code"] == "bad_request"


async def test_get_v1_jobs_is_job_list_with_its_status_filter(world: World) -> None:
    assert world.plane.web is not None
    base = world.plane.web.url.rstrip("/")
    async with aiohttp.ClientSession() as session:
        async with session.get(base + "/v1/jobs") as response:
            assert response.status == 200
            assert (await response.json())["items"] == [ETL, HUGE, TRAIN]
        async with session.get(base + "/v1/jobs?status=dead") as response:
            assert [j["id"] for j in (await response.json())["items"]] == ["etl"]
        async with session.get(base + "/v1/job/list?status=running,dead") as response:
            assert len((await response.json())["items"]) == 3
        async with session.get(base + "/v1/jobs?status=sideways") as response:
            body = await response.json()
            assert (response.status, body["code"]) == (400, "bad_request"), body
        async with session.get(base + "/openapi.json") as response:
            paths = (await response.json())["paths"]
            assert "get" in paths["/v1/job/list"]


async def test_herd_job_list_prints_a_table_json_and_csv_and_refuses_a_bad_status(
        world: World) -> None:
    def run(*args: str) -> Any:
        return asyncio.to_thread(herd, "job", "list", *args, server=world.url)

    table = await run()
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["ID", "STATUS", "VERSION", "COUNT", "PRIORITY", "ALLOCATIONS"]
    assert [line.split() for line in lines[1:]] == [
        ["etl", "dead", "1", "1", "50", "complete=1"],
        ["huge", "running", "1", "1", "50"],
        ["train", "running", "1", "3", "50", "failed=1,running=2"]]

    as_json = await run("--status", "running", "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == [HUGE, TRAIN]

    as_csv = await run("-o", "csv", "--status", "dead")
    rows = list(csv.reader(io.StringIO(as_csv.stdout)))
    assert rows == [["ID", "STATUS", "VERSION", "COUNT", "PRIORITY", "ALLOCATIONS"],
                    ["etl", "dead", "1", "1", "50", "complete=1"]]

    bad = await run("--status", "sideways")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [
        "Error: unknown job status 'sideways'; choose from running, dead"]


async def test_a_finished_batch_job_is_complete_and_a_blocked_one_says_what_rules_nodes_out(
        world: World) -> None:
    """Issue 28 item 5: ``phase`` says complete for a job whose every slot exited 0 (its
    ``status`` stays running: it was never stopped), and a job that fits nowhere is
    blocked with, per resource, the nodes that lacked it (huge wants 8 GPUs of 4)."""
    reply = await world.call("job.register", spec=spec("batch", 1, 1))
    assert reply["ok"], reply
    await world.until(lambda: len(world.allocs("batch")) == 1, "batch placed")
    [only] = world.allocs("batch")
    await world.report(AllocCompleted(node_id="gpu-1", alloc_id=only.id, exit_code=0))
    batch = (await world.call("job.status", id="batch"))["result"]
    assert (batch["status"], batch["phase"], batch["placement"]) == ("running", "complete", None)
    listed = {j["id"]: j["phase"] for j in (await world.call("job.list"))["result"]["items"]}
    assert listed == {"batch": "complete", "etl": "dead", "huge": "blocked", "train": "running"}

    huge = (await world.call("job.status", id="huge"))["result"]
    assert huge["phase"] == "blocked"
    assert [e["status"] for e in huge["evals"]].count("blocked") == 1
    why = huge["placement"]
    assert why["exhausted"] == {"gpus": 1} and why["filtered"] == {}, why
    assert (why["nodes_evaluated"], why["fit"], why["unplaced"]) == (1, 0, 1)
    assert why["needs"]["gpus"] == 8
    # a cordoned node is ruled out by its state before its resources
    assert (await world.call("node.cordon", id="gpu-1", reason="test"))["ok"]
    why = (await world.call("job.status", id="huge"))["result"]["placement"]
    assert why["filtered"] == {"node CORDONED": 1} and why["exhausted"] == {}, why


async def test_eval_describe_and_job_plan_say_what_fits_where_and_why_not(
        world: World, tmp_path: Path) -> None:
    """Issue 31 item 2: `herd eval describe` shows an evaluation, what it placed and, while
    its job waits, why per constraint and resource; `herd job plan` is a dry run of the
    scheduler's own code (nothing appended) that exits 1 when a slot would not fit."""
    evals = sorted((e for e in world.projector.evals.values()), key=lambda e: e.version)
    [first_train] = [e for e in evals if e.job_id == "train"][:1]
    [blocked] = [e for e in evals if e.job_id == "huge" and e.status == "blocked"]
    train = (await world.call("eval.describe", id=first_train.id))["result"]
    assert (train["eval"]["id"], train["placed"], train["unplaced"], train["placement"]) == (
        first_train.id, 3, 0, None)
    huge = (await world.call("eval.describe", id=blocked.id[:8]))["result"]
    assert (huge["eval"]["status"], huge["job_phase"], huge["placed"], huge["unplaced"]) == (
        "blocked", "blocked", 0, 1)
    # 4 GPUs, 2 taken by train's running allocations (its failed one holds none)
    why = "8 GPUs asked; largest free: 2 on 1 node; short on 1 node"
    assert huge["placement"]["reasons"] == [why]
    async with aiohttp.ClientSession() as session:
        async with session.get(world.plane.web.url.rstrip("/") + f"/v1/eval/describe?id={blocked.id}"
                               ) as response:
            assert response.status == 200 and (await response.json()) == huge

    described = await asyncio.to_thread(herd, "eval", "describe", blocked.id, server=world.url)
    assert described.returncode == 0, described.stderr
    assert "why not placed:" in described.stdout and why in described.stdout
    status = await asyncio.to_thread(herd, "job", "status", "huge", server=world.url)
    assert status.returncode == 0 and why in status.stdout, status.stderr

    js = world.nc.jetstream()
    last = (await js.stream_info("HERD_EVENTS")).state.last_seq
    before = dict(world.projector.jobs)
    spec_file = tmp_path / "more.yaml"
    spec_file.write_text('id: more\ncount: 2\ncommand: ["true"]\n'
                         "resources: {cpu: 0.1, memory_mb: 0, gpus: 1}\n")
    fits = await asyncio.to_thread(herd, "job", "plan", str(spec_file), server=world.url)
    assert fits.returncode == 0, fits.stderr
    assert "2 to place, 0 to stop, 0 would not be placed" in fits.stdout
    assert fits.stdout.count("gpu-1") == 2 and "why not placed" not in fits.stdout
    spec_file.write_text(spec_file.read_text().replace("count: 2", "count: 3"))
    short = await asyncio.to_thread(herd, "job", "plan", str(spec_file), "-o", "json",
                                    server=world.url)
    assert short.returncode == 1, short.stderr
    plan = json.loads(short.stdout)
    assert ([p["node_id"] for p in plan["place"]], plan["unplaced"]) == (["gpu-1"] * 2, 1)
    assert plan["placement"]["reasons"] == [
        "1 GPU asked; largest free: 0 on 1 node; short on 1 node"], plan
    # a dry run: no job, no evaluation, nothing appended
    assert dict(world.projector.jobs) == before and "more" not in world.projector.jobs
    assert (await js.stream_info("HERD_EVENTS")).state.last_seq == last
    missing = await asyncio.to_thread(herd, "eval", "describe", "nothere", server=world.url)
    assert (missing.returncode, missing.stdout) == (1, ""), missing.stderr

    # alloc.logs asks the allocation's node's agent (here the test answers for gpu-1, as
    # an agent whose log file does not exist would): none answering is unavailable, a
    # running allocation without output yet is empty, a finished one's is not found
    [running_alloc] = [a for a in world.allocs("train") if a.status == "running"][:1]
    [done] = world.allocs("etl")
    reply = await world.call("alloc.logs", id=running_alloc.id)
    assert (reply["ok"], reply["code"]) == (False, "unavailable"), reply

    async def no_output(msg: Any) -> None:
        asked = msgspec.json.decode(msg.data, type=LogsRequest)
        await msg.respond(msgspec.json.encode(LogsReply(
            ok=False, missing=True, error=f"no output of allocation {asked.alloc_id}")))

    sub = await world.nc.subscribe(logs_subject("gpu-1"), cb=no_output)
    try:
        reply = await world.call("alloc.logs", id=running_alloc.id[:12], tail=5)
        assert reply["result"] == {
            "alloc_id": running_alloc.id, "node_id": "gpu-1", "data": "", "offset": 0,
            "next_offset": 0, "size": 0, "truncated": False, "running": True}, reply
        reply = await world.call("alloc.logs", id=done.id)
        assert (reply["ok"], reply["code"]) == (False, "not_found"), reply
    finally:
        await sub.unsubscribe()
