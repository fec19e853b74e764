"""GPU series (issue 27 item 4): dcgm-exporter's names and labels on /metrics/gpus, a reading
the GPU lacks is no sample, shards split the nodes exactly; herdbook's node and GPU health
series on /metrics; and the shipped Grafana dashboard queries only series herdbook
exports. Pure (views and samples in memory)."""

from __future__ import annotations

import asyncio
import gc
import json
import re
import weakref
from collections.abc import Awaitable
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from herdbook.control import gpu_metrics, metrics
from herdbook.control.gpu_metrics import (
    GpuExposition,
    HealthCollector,
    exported_names,
    parse_shard,
)
from herdbook.events.health_report import GpuVerdict
from herdbook.events.node import GpuInfo, NodeInfo
from herdbook.events.states import Approval, Health, Lifecycle, NodeType
from herdbook.events.telemetry import GpuReading, GpuTelemetry
from herdbook.projector.node_view import NodeView
from herdbook.reactors.telemetry_intake import Sample

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "examples" / "grafana" / "herdbook-fleet.json"


def view(node_id: str, health: Health = Health.HEALTHY,
         gpus: dict[int, GpuVerdict] | None = None) -> NodeView:
    return NodeView(id=node_id, type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=Lifecycle.READY, health=health,
                    info=NodeInfo(hostname=f"host-{node_id}", labels={"pool": "a100"},
                                  gpus=[GpuInfo(index=i, uuid=f"GPU-{node_id}-{i}",
                                                name="NVIDIA A100") for i in range(2)]),
                    gpus=gpus or {}, health_level="critical" if gpus else "healthy")


class Samples:
    def __init__(self, by_node: dict[str, Sample]) -> None:
        self.by_node = by_node

    def of(self, node_id: str) -> Sample | None:
        return self.by_node.get(node_id)


CRIT = GpuVerdict(level="critical", rule="critical-xid", reason="critical-xid: XID 48 on GPU 1",
                  kind="xid", xid=48)
NODES = {"n1": view("n1", Health.UNHEALTHY, {1: CRIT}), "n2": view("n2")}
SAMPLES = Samples({"n1": Sample(GpuTelemetry(
    node_id="n1", boot_id="b", hostname='dgx"01', gpus=(
        GpuReading(index=0, uuid="GPU-n1-0", model="NVIDIA A100", pci_bus_id="00000000:07:00.0",
                   driver_version="550.54", temperature_c=64.0, power_w=310.5,
                   fb_used_mib=1024.0, fb_total_mib=40960.0, sm_clock_mhz=1410,
                   ecc_dbe_volatile=0, nvlink_up=(True, False)),
        GpuReading(index=1, uuid="GPU-n1-1", model="NVIDIA A100", power_w=90.0))),
    0.0, live=True)})


def test_dcgm_series_carry_dcgm_labels_and_an_absent_reading_is_no_sample() -> None:
    text = GpuExposition(lambda: NODES, SAMPLES).render().decode()
    labels = ('gpu="0",UUID="GPU-n1-0",pci_bus_id="00000000:07:00.0",device="nvidia0",'
              'modelName="NVIDIA A100",Hostname="dgx\\"01",DCGM_FI_DRIVER_VERSION="550.54",'
              'node="n1"')
    assert f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 64.0\n" in text
    assert f"DCGM_FI_DEV_SM_CLOCK{{{labels}}} 1410\n" in text
    assert f"DCGM_FI_DEV_FB_FREE{{{labels}}} 39936.0\n" in text
    assert f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{labels}}} 0\n" in text
    assert f'herd_gpu_nvlink_up{{{labels},link="1"}} 0\n' in text
    assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n" in text
    # GPU 1 measured no temperature: no sample at all (never a 0 °C GPU)
    temps = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    assert len(temps) == 1
    assert 'herd_gpu_verdict_level{gpu="1",UUID="GPU-n1-1"' in text
    assert re.search(r'herd_gpu_verdict_level\{gpu="1",[^}]*node="n1"\} 3\n', text)
    assert re.search(r'herd_gpu_verdict_level\{gpu="0",[^}]*node="n2"\} 0\n', text)
    # each family's samples are together, under one HELP and TYPE
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(names) == len(set(names)) == len(gpu_metrics.GPU_FAMILIES)


def test_shards_split_the_nodes_exactly_and_bad_ones_are_refused() -> None:
    nodes = {f"n{i}": view(f"n{i}") for i in range(40)}
    exposition = GpuExposition(lambda: nodes, Samples({}))
    whole = {line for line in exposition.render().decode().splitlines() if line[0] != "#"}
    parts = [{line for line in exposition.render(s, 3).decode().splitlines() if line[0] != "#"}
             for s in range(3)]
    assert set().union(*parts) == whole and sum(map(len, parts)) == len(whole)
    assert all(parts)
    assert parse_shard({"shard": "2", "shards": "3"}) == (2, 3)
    for bad in ({"shard": "3", "shards": "3"}, {"shards": "0"}, {"shard": "x"}):
        try:
            parse_shard(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad} accepted")


def test_health_series_name_nodes_and_only_the_gpus_not_healthy() -> None:
    registry = CollectorRegistry()
    registry.register(HealthCollector(lambda: NODES, SAMPLES))
    text = generate_latest(registry).decode()
    assert 'herd_node_state{health="UNHEALTHY",node="n1",pool="a100",state="UNHEALTHY"} 1.0' in text
    assert 'herd_node_verdict_level{node="n1"} 3.0' in text
    assert 'herd_node_verdict_level{node="n2"} 0.0' in text
    assert 'herd_gpus{health="critical"} 1.0' in text and 'herd_gpus{health="healthy"} 3.0' in text
    bad = [line for line in text.splitlines() if line.startswith("herd_gpu_health{")]
    assert bad == ['herd_gpu_health{Hostname="dgx\\"01",UUID="GPU-n1-1",gpu="1",'
                   'health="critical",modelName="NVIDIA A100",node="n1",rule="critical-xid"} 3.0']


PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                "unless", "bool", "offset", "le", "inf", "nan"}


def series_of(expr: str) -> set[str]:
    """The series names a PromQL expression reads: identifiers that are not functions,
    keywords, label names in braces or grouping clauses, or quoted text."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        rest = expr[match.end():].lstrip()
        if rest.startswith("(") or match.group().lower() in PROMQL_WORDS:
            continue
        names.add(match.group())
    return names


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            found = re.fullmatch(r"label_values\((\w+),\s*\w+\)", query["query"])
            assert found, query
            queries.append(found.group(1))
    return queries


def herdbook_series() -> set[str]:
    """Every series name herdbook writes: the GPU and health families, and the control
    plane's own (``control/metrics.py`` names each in one string literal)."""
    source = Path(metrics.__file__).read_text()
    return exported_names() | set(re.findall(r'"(herd_[a-z_]+)"', source))


def test_every_dashboard_query_names_series_herdbook_exports() -> None:
    exported = herdbook_series()
    queries = dashboard_queries()
    assert len(queries) >= 20
    for expr in queries:
        names = series_of(expr)
        assert names, f"{expr!r} names no series"
        for name in names:
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name in exported or base in exported, f"{expr!r}: {name} is not exported"
    # the dashboards written for dcgm-exporter: its four headline series are there
    used = set().union(*map(series_of, queries))
    assert {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_SM_CLOCK"} <= used


def test_the_query_reader_finds_a_series_that_is_not_exported() -> None:
    assert series_of('sum by (node) (rate(herd_nope_total{a="b"}[5m]))') == {"herd_nope_total"}
    assert "herd_nope_total" not in herdbook_series()


class HeldSample(Sample):
    """A Sample a weak reference can watch (``Sample`` has slots and no ``__weakref__``)."""


def test_a_scrape_keeps_no_sample_alive() -> None:
    """Nothing of a scrape is kept: at 15 s samples and a 60 s scrape a cache of each
    node's lines never hit, and it held the sample and the page (~1 GB at 10k nodes)."""
    first = HeldSample(SAMPLES.by_node["n1"].telemetry, 0.0, True)
    samples = Samples({"n1": first})
    exposition = GpuExposition(lambda: NODES, samples)
    assert b"DCGM_FI_DEV_GPU_TEMP{" in exposition.render()
    watch = weakref.ref(first)
    samples.by_node["n1"] = Sample(SAMPLES.by_node["n1"].telemetry, 15.0, True)
    del first
    gc.collect()
    assert watch() is None, "/metrics/gpus keeps a replaced sample"


async def loop_turns(rendering: Awaitable[list[bytes]]) -> tuple[int, list[bytes]]:
    """What ``rendering`` returns, and how often another task ran meanwhile."""
    turns = 0

    async def beside() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.ensure_future(beside())
    await asyncio.sleep(0)
    before = turns
    parts = await rendering
    other.cancel()
    return turns - before, parts


async def test_the_page_gives_the_event_loop_back_between_chunks_of_nodes() -> None:
    nodes = {f"n{i:03d}": view(f"n{i:03d}") for i in range(3 * gpu_metrics.CHUNK + 1)}
    exposition = GpuExposition(lambda: nodes, Samples({}))
    turns, parts = await loop_turns(exposition.chunks())
    assert turns >= 4, "the whole page rendered without returning to the loop"
    assert b"".join(parts) == exposition.render()
    # a node deleted while the page renders is left out, the others are all there
    gone = GpuExposition(lambda: nodes, Samples({}))
    steps = asyncio.ensure_future(gone.chunks())
    await asyncio.sleep(0)
    del nodes["n150"]
    text = b"".join(await steps).decode()
    assert 'node="n150"' not in text and 'node="n149"' in text and 'node="n000"' in text


async def test_the_health_series_render_in_chunks_as_prometheus_client_writes_them() -> None:
    """/metrics' per-node health series (10k nodes: ~0.25 s of CPU) are rendered a chunk
    of nodes at a time with the event loop given back between chunks, into the text
    ``generate_latest`` writes for the same families at once, byte for byte."""
    nodes = {f"n{i:03d}": view(f"n{i:03d}") for i in range(3 * gpu_metrics.CHUNK + 1)}
    nodes["n001"] = NODES["n1"]     # a GPU not healthy, a quoted hostname in its sample
    samples = Samples({"n001": SAMPLES.by_node["n1"]})
    collector = HealthCollector(lambda: nodes, samples)
    registry = CollectorRegistry()
    registry.register(collector)
    turns, parts = await loop_turns(collector.chunks())
    assert turns >= 4, "every node's series rendered without returning to the loop"
    assert b"".join(parts) == generate_latest(registry)
    assert b'herd_gpu_health{Hostname="dgx\\"01"' in parts[-1]
    empty = HealthCollector(dict, Samples({}))
    assert b"".join(await empty.chunks()).decode().count("# TYPE") == 4
