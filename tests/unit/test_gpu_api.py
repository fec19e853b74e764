"""The GPU health API (issue 27 item 3) over views and samples in memory: ``gpu.list``
filters and pages, ``gpu.describe`` says the verdict's cause, the faults with XIDs and
times, their counts and the serial's history across nodes; the OpenAPI document names
GET /v1/gpus and /v1/nodes/{id}/gpus. Pure apart from msgspec."""

from __future__ import annotations

import asyncio
import gc
import random
import weakref
from datetime import UTC, datetime

import msgspec
import pytest

from herdbook.api.gpu_rows import iso_when, moment, node_gpus, node_rows
from herdbook.api.gpus import GpuRoutes
from herdbook.api.lookup import ApiError
from herdbook.api.messages import GpuDetail, GpuSummary
from herdbook.events.health_report import GpuEvent, GpuVerdict, HealthReport
from herdbook.events.node import GpuInfo, NodeInfo
from herdbook.events.states import Approval, Health, Lifecycle, NodeType
from herdbook.events.telemetry import GpuReading, GpuTelemetry
from herdbook.health.fault_history import FaultHistory
from herdbook.projector.node_view import NodeView
from herdbook.reactors.telemetry_intake import Sample
from herdbook.web.openapi import document
from tests.fakes import FakeClock

T0 = 1_800_000_000.0
CLOCK = FakeClock(datetime.fromtimestamp(T0 + 3600, UTC))


def node(node_id: str, gpus: int, pool: str, health: Health = Health.HEALTHY,
         verdicts: dict[int, GpuVerdict] | None = None) -> NodeView:
    return NodeView(id=node_id, type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=Lifecycle.READY, health=health,
                    info=NodeInfo(hostname=f"host-{node_id}", labels={"pool": pool},
                                  gpus=[GpuInfo(index=i, uuid=f"GPU-{node_id}-{i}",
                                                name="NVIDIA H100") for i in range(gpus)]),
                    gpus=verdicts or {})


XID48 = GpuVerdict(level="critical", rule="critical-xid", reason="critical-xid: XID 48 on GPU 3",
                   kind="xid", xid=48, since=T0)


class Samples:
    def __init__(self) -> None:
        self.by_node: dict[str, Sample] = {}

    def of(self, node_id: str) -> Sample | None:
        return self.by_node.get(node_id)


def world() -> tuple[GpuRoutes, dict[str, NodeView], Samples, FaultHistory]:
    nodes = {"a1": node("a1", 4, "a100", Health.UNHEALTHY, {3: XID48}),
             "a2": node("a2", 4, "a100"), "h1": node("h1", 8, "h100")}
    samples = Samples()
    samples.by_node["a1"] = Sample(GpuTelemetry(
        node_id="a1", boot_id="b", sampled_at=T0, hostname="host-a1",
        gpus=(GpuReading(index=3, uuid="GPU-a1-3", serial="1650921000123",
                         temperature_c=71.0, power_w=402.5, gpu_util_pct=97.0,
                         fb_used_mib=61000.0, fb_total_mib=81559.0, sm_clock_mhz=1980),)),
        T0 + 1, live=True)
    faults = FaultHistory(CLOCK)
    for at, xid in ((T0 - 3 * 86400, 13), (T0 - 60, 13), (T0, 48)):
        faults.record(HealthReport(report_id="r", node_id="a1", boot_id="b",
                                   events=(GpuEvent(kind="xid", gpu=3, xid=xid),)), at)
    faults.record_pull("GPU-a1-3", HealthReport(report_id="r", node_id="x9", boot_id="old"),
                       T0 - 86400)
    return GpuRoutes(lambda: nodes, samples, faults, CLOCK), nodes, samples, faults


async def listed(routes: GpuRoutes, **query: object) -> tuple[list[dict[str, object]], str | None]:
    raw = await routes.gpu_list(msgspec.json.encode(query))
    page = msgspec.json.decode(bytes(raw))
    return page["items"], page["next_token"]


async def test_every_gpu_of_the_fleet_lists_with_health_cause_and_readings() -> None:
    routes, *_ = world()
    items, token = await listed(routes)
    assert token is None and len(items) == 16
    assert [(i["node_id"], i["index"]) for i in items[:5]] == [
        ("a1", 0), ("a1", 1), ("a1", 2), ("a1", 3), ("a2", 0)]
    bad = items[3]
    assert (bad["health"], bad["cause"], bad["node_health"]) == (
        "critical", "critical-xid: XID 48 on GPU 3", "UNHEALTHY")
    assert (bad["temperature_c"], bad["power_w"], bad["serial"]) == (71.0, 402.5, "1650921000123")
    assert items[0]["health"] == "healthy" and items[0]["temperature_c"] is None


async def test_filters_by_selector_health_and_node_and_pages_in_order() -> None:
    routes, *_ = world()
    assert len((await listed(routes, labels={"pool": "h100"}))[0]) == 8
    crit, _ = await listed(routes, health=["critical"])
    assert [(i["node_id"], i["index"]) for i in crit] == [("a1", 3)]
    assert len((await listed(routes, node_id="a2"))[0]) == 4
    seen: list[tuple[object, object]] = []
    token = None
    while True:
        items, token = await listed(routes, limit=5, **({"next_token": token} if token else {}))
        seen += [(i["node_id"], i["index"]) for i in items]
        if token is None:
            break
    assert len(seen) == 16 and len(set(seen)) == 16
    with pytest.raises(msgspec.ValidationError, match="Invalid enum value 'sick'"):
        await listed(routes, health=["sick"])


async def test_describe_names_the_cause_the_faults_their_counts_and_the_serial() -> None:
    routes, *_ = world()
    detail = await routes.gpu_describe(msgspec.json.encode({"node_id": "a1", "index": 3}))
    assert isinstance(detail, GpuDetail)
    assert detail.verdict is not None and (detail.verdict.rule, detail.verdict.xid) == (
        "critical-xid", 48)
    assert [(f.kind, f.xid) for f in detail.faults] == [("xid", 48), ("xid", 13), ("xid", 13)]
    assert detail.faults[0].at.startswith("2027-01-15")
    assert detail.fault_counts == {"24h": {"xid 13": 1, "xid 48": 1},
                                   "7d": {"xid 13": 2, "xid 48": 1}}
    assert [(p.node_id, p.boot_id) for p in detail.serial_pulls] == [("x9", "old")]
    assert detail.serial_seen_on == ["a1"]
    assert detail.readings is not None and detail.readings["sm_clock_mhz"] == 1980
    with pytest.raises(ApiError, match="node a2 has no GPU 9"):
        await routes.gpu_describe(msgspec.json.encode({"node_id": "a2", "index": 9}))


def test_a_node_without_a_verdict_yet_has_gpus_of_unknown_health() -> None:
    fresh = node("n", 2, "p", Health.UNKNOWN)
    assert [g.health for g in node_gpus(fresh, None)] == ["unknown", "unknown"]


def test_the_openapi_document_has_the_gpu_routes_and_rest_paths() -> None:
    paths = document()["paths"]
    for path in ("/v1/gpu/list", "/v1/gpu/describe", "/v1/gpus", "/v1/nodes/{node_id}/gpus",
                 "/v1/gpus/{node_id}/{index}"):
        assert "get" in paths[path], path
    params = {p["name"]: p["in"] for p in paths["/v1/nodes/{node_id}/gpus"]["get"]["parameters"]}
    assert params["node_id"] == "path" and params["health"] == "query"


class HeldSample(Sample):
    """A Sample a weak reference can watch (``Sample`` has slots and no ``__weakref__``)."""


def reading_sample(node_id: str, temperature: float, at: float) -> Sample:
    return HeldSample(GpuTelemetry(
        node_id=node_id, boot_id="b", sampled_at=at, hostname=f"host-{node_id}",
        gpus=tuple(GpuReading(index=i, uuid=f"GPU-{node_id}-{i}", temperature_c=temperature)
                   for i in range(4))), at + 1, True)


async def test_the_row_cache_keeps_no_replaced_sample_alive_and_follows_the_new_one() -> None:
    routes, nodes, samples, _ = world()
    samples.by_node["a2"] = first = reading_sample("a2", 40.0, T0)
    assert (await listed(routes, node_id="a2"))[0][0]["temperature_c"] == 40.0
    watch = weakref.ref(first)
    samples.by_node["a2"] = reading_sample("a2", 41.0, T0 + 15)   # the agent's next one
    del first
    gc.collect()
    assert watch() is None, "the gpu.list row cache holds a replaced sample"
    items, _ = await listed(routes, node_id="a2")
    assert [i["temperature_c"] for i in items] == [41.0] * 4
    # a view change alone rebuilds the rows too (same sample)
    nodes["a2"] = msgspec.structs.replace(nodes["a2"], health=Health.UNKNOWN)
    assert {i["health"] for i in (await listed(routes, node_id="a2"))[0]} == {"unknown"}


async def test_whole_node_fragments_page_as_single_rows_would() -> None:
    """Pages made of each node's cached fragment hold the GPUs, in order and byte for
    byte, that pages of one GPU each hold; a health filter takes only matching GPUs."""
    routes, *_ = world()
    one_by_one: list[bytes] = []
    token = None
    while True:
        page = msgspec.json.decode(bytes(await routes.gpu_list(msgspec.json.encode(
            {"limit": 1, **({"next_token": token} if token else {})}))), type=RawPage)
        one_by_one += [bytes(item) for item in page.items]
        token = page.next_token
        if token is None:
            break
    whole = msgspec.json.decode(bytes(await routes.gpu_list(b"{}")), type=RawPage)
    assert [bytes(i) for i in whole.items] == one_by_one and len(one_by_one) == 16
    critical = msgspec.json.decode(bytes(await routes.gpu_list(
        msgspec.json.encode({"health": ["critical"]}))), type=RawPage)
    assert [bytes(i) for i in critical.items] == [one_by_one[3]]


class RawPage(msgspec.Struct):
    items: list[msgspec.Raw]
    next_token: str | None = None


def test_the_listing_rows_encode_as_gpu_summaries_do() -> None:
    """``node_rows`` builds positional rows for speed: the JSON of each is that of the
    ``GpuSummary`` of the same GPU, every field in its order and with its value."""
    routes, nodes, samples, _ = world()
    view, sample = nodes["a1"], samples.of("a1")
    rows = node_rows(view, sample)
    summaries = node_gpus(view, sample)
    assert [msgspec.json.encode(r) for r in rows] == [msgspec.json.encode(s) for s in summaries]
    bad = msgspec.structs.asdict(summaries[3])
    assert list(bad) == list(GpuSummary.__struct_fields__)
    assert bad == {
        "node_id": "a1", "index": 3, "uuid": "GPU-a1-3", "serial": "1650921000123",
        "model": "NVIDIA H100", "hostname": "host-a1", "health": "critical",
        "cause": "critical-xid: XID 48 on GPU 3", "since": "2027-01-15T08:00:00Z",
        "node_state": "UNHEALTHY", "node_health": Health.UNHEALTHY, "pool": "a100",
        "temperature_c": 71.0, "power_w": 402.5, "gpu_util_pct": 97.0,
        "fb_used_mib": 61000.0, "fb_total_mib": 81559.0, "sampled_at": "2027-01-15T08:00:00Z",
        "recommended_action": None, "power_limit_w": None, "ecc_sbe_volatile": None,
        "ecc_dbe_volatile": None, "remapped_rows_uncorrectable": None}


def test_samples_and_listing_rows_are_not_walked_by_the_garbage_collector() -> None:
    """A control plane holds ~180k readings at 10k nodes and a cold listing makes 80k
    rows: untracked, a full collection (which stalls the loop) walks none of them."""
    body = msgspec.json.encode(GpuTelemetry(node_id="n", boot_id="b", gpus=(
        GpuReading(index=0, nvlink_up=(True, False), throttle_names=("hw_slowdown",)),)))
    decoded = msgspec.json.decode(body, type=GpuTelemetry)
    assert not gc.is_tracked(decoded) and not gc.is_tracked(decoded.gpus[0])
    routes, nodes, samples, _ = world()
    assert not any(gc.is_tracked(row) for row in node_rows(nodes["a1"], samples.of("a1")))
    asyncio.run(listed(routes))
    assert len(routes._rows) == 3 and not any(map(gc.is_tracked, routes._rows.values()))


async def test_the_next_page_is_built_while_this_one_travels() -> None:
    """A page with a next one sets the next page's rows building, a few nodes at a time
    with the loop given back, so its request finds them built; a page without a next
    one, or of one node, builds nothing ahead."""
    routes, *_ = world()                # a1, a2: 4 GPUs each; h1: 8
    items, token = await listed(routes, limit=4)
    assert len(items) == 4 and token == "a1/3" and "h1" not in routes._rows
    for _ in range(3):
        await asyncio.sleep(0)
    assert "h1" in routes._rows, "the page after a1's was not built ahead"
    quiet, *_ = world()
    await listed(quiet, node_id="a1", limit=2)
    await listed(quiet)
    for _ in range(3):
        await asyncio.sleep(0)
    assert quiet._warming is None


async def test_a_listing_goes_on_past_a_node_deleted_while_it_pages() -> None:
    """A later page of a listing takes the node ids its first page sorted (no key-set
    comparison per page) unless their count changed: a node deleted meanwhile (and
    another added, the count the same) is skipped, not an error."""
    routes, nodes, *_ = world()         # a1, a2: 4 GPUs each; h1: 8
    items, token = await listed(routes, limit=4)
    assert token == "a1/3"
    del nodes["a2"]
    nodes["b1"] = node("b1", 2, "b")
    items, token = await listed(routes, limit=8, next_token="a1/3")
    assert [(i["node_id"], i["index"]) for i in items] == [("h1", g) for g in range(8)]
    assert token is None
    items, _ = await listed(routes)     # a new listing sorts again
    assert {i["node_id"] for i in items} == {"a1", "b1", "h1"}


def test_the_listing_writes_its_times_as_every_reply_does() -> None:
    """The listing's rows carry datetimes (``moment``, a tenth of ``isoformat``'s cost)
    that msgspec writes as ``iso_when`` writes the same epoch: whole seconds, microseconds,
    rounding at the microsecond's edge, the epoch's start."""
    rng = random.Random(27)
    print("seed 27")
    epochs = [1.0, 1_800_000_000.0, 1_800_000_000.5, 1e9 + 0.9999995, 1e9 + 0.9999994,
              *(rng.uniform(1e9, 2e9) for _ in range(20_000))]
    for epoch in epochs:
        assert msgspec.json.encode(moment(epoch)) == msgspec.json.encode(iso_when(epoch)), epoch
    assert moment(0.0) is None and iso_when(0.0) is None
