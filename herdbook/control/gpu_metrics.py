"""GPU series for Prometheus (issue 27 item 4), served by the control plane's metrics server
(``herd up --metrics-port``):

- ``GET /metrics`` gains herdbook's health series, one per node and one per GPU that is
  not healthy (``HealthCollector``): small at any fleet size, scraped often, what alerts
  read.
- ``GET /metrics/gpus`` is every GPU's readings under dcgm-exporter's names and labels
  (``DCGM_FI_DEV_GPU_TEMP{gpu,UUID,pci_bus_id,device,modelName,Hostname,...}``), so the
  GPU dashboards written for dcgm-exporter work unchanged, plus each GPU's verdict level
  (``herd_gpu_verdict_level``) under the same labels. It grows with the fleet (~25
  series per GPU), so it is its own endpoint: scraped less often, and split with
  ``?shard=i&shards=n`` (nodes by a stable hash of their id) across scrape jobs or
  Prometheus servers. docs/gpus.md "Metrics and dashboards" has the scrape config.

Both read what the control plane holds at scrape time: the view (verdicts) and the
telemetry intake (the latest sample per node); nothing is kept per scrape. The text of
``/metrics/gpus`` is written here, not by prometheus-client (its objects per sample cost
several times the text), in chunks of nodes with the event loop given back between
them.
"""

from __future__ import annotations

import asyncio
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from herdbook.events.health_report import VERDICT_LEVELS, gpu_level
from herdbook.events.states import Health
from herdbook.events.telemetry import GpuReading
from herdbook.projector.node_view import NodeView
from herdbook.reactors.telemetry_intake import Sample

LEVELS: dict[str, int] = {
    "unknown": -1, **{level: rank for rank, level in enumerate(VERDICT_LEVELS)}}
"""A verdict level as a number (``herd_*_verdict_level``): worse is higher."""
_NODE_LEVEL = {Health.UNKNOWN: "unknown", Health.HEALTHY: "healthy",
               Health.DEGRADED: "degraded", Health.UNHEALTHY: "unhealthy"}


class SampleLookup(Protocol):
    def of(self, node_id: str) -> Sample | None: ...


def node_level(view: NodeView) -> str:
    """The node's verdict level: the recorded one, else what its health says."""
    if view.health_level in LEVELS and view.health is not Health.UNKNOWN:
        return view.health_level
    return _NODE_LEVEL.get(view.health, "unknown")


class Field(NamedTuple):
    name: str
    kind: str           # gauge | counter, as dcgm-exporter declares it
    help: str
    read: Callable[[GpuReading], float | int | bool | None]


def _free(r: GpuReading) -> float | None:
    if r.fb_total_mib is None or r.fb_used_mib is None:
        return None
    return r.fb_total_mib - r.fb_used_mib


DCGM_FIELDS: tuple[Field, ...] = (
    Field("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda r: r.temperature_c),
    Field("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda r: r.power_w),
    Field("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W).",
          lambda r: r.power_limit_w),
    Field("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda r: r.gpu_util_pct),
    Field("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).",
          lambda r: r.mem_util_pct),
    Field("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
          lambda r: r.fb_used_mib),
    Field("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", _free),
    Field("DCGM_FI_DEV_FB_TOTAL", "gauge", "Framebuffer memory total (in MiB).",
          lambda r: r.fb_total_mib),
    Field("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).",
          lambda r: r.sm_clock_mhz),
    Field("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).",
          lambda r: r.mem_clock_mhz),
    Field("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge",
          "Current clock throttle reasons (bitmask of nvmlClocksThrottleReason*).",
          lambda r: r.throttle_reasons),
    Field("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter",
          "Total number of single-bit volatile ECC errors.", lambda r: r.ecc_sbe_volatile),
    Field("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
          "Total number of double-bit volatile ECC errors.", lambda r: r.ecc_dbe_volatile),
    Field("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter",
          "Total number of single-bit persistent ECC errors.", lambda r: r.ecc_sbe_aggregate),
    Field("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter",
          "Total number of double-bit persistent ECC errors.", lambda r: r.ecc_dbe_aggregate),
    Field("DCGM_FI_DEV_RETIRED_SBE", "counter",
          "Total number of retired pages due to single-bit errors.",
          lambda r: r.retired_pages_sbe),
    Field("DCGM_FI_DEV_RETIRED_DBE", "counter",
          "Total number of retired pages due to double-bit errors.",
          lambda r: r.retired_pages_dbe),
    Field("DCGM_FI_DEV_RETIRED_PENDING", "gauge",
          "1 while a page is pending retirement.", lambda r: r.retired_pages_pending),
    Field("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
          "Number of remapped rows for correctable errors.",
          lambda r: r.remapped_rows_correctable),
    Field("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
          "Number of remapped rows for uncorrectable errors.",
          lambda r: r.remapped_rows_uncorrectable),
    Field("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "1 while a row remapping is pending.",
          lambda r: r.remapped_rows_pending),
    Field("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "1 if a row remapping has failed.",
          lambda r: r.remapped_rows_failed),
    Field("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.",
          lambda r: r.pcie_replay_count),
    Field("DCGM_FI_DEV_PCIE_LINK_GEN", "gauge", "PCIe link generation now.",
          lambda r: r.pcie_gen),
    Field("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "gauge", "PCIe link generation at most.",
          lambda r: r.pcie_gen_max),
    Field("DCGM_FI_DEV_PCIE_LINK_WIDTH", "gauge", "PCIe link width now (lanes).",
          lambda r: r.pcie_width),
    Field("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "gauge", "PCIe link width at most (lanes).",
          lambda r: r.pcie_width_max),
)
"""dcgm-exporter's series, by its names, help and types; a reading the GPU does not have
is no sample (absent, never zero)."""

VERDICT = "herd_gpu_verdict_level"
NVLINK = "herd_gpu_nvlink_up"
GPU_FAMILIES: tuple[tuple[str, str, str], ...] = (
    *((f.name, f.kind, f.help) for f in DCGM_FIELDS),
    (NVLINK, "gauge", "1 per NVLink link that is up, 0 down (label link)."),
    (VERDICT, "gauge", "The GPU's verdict level: -1 unknown, 0 healthy, 1 degraded, "
                       "2 unhealthy, 3 critical, 4 fatal (the classifier's)."),
)
"""Every family ``/metrics/gpus`` writes, in order: (name, type, help)."""
HEALTH_FAMILIES = ("herd_node_state", "herd_node_verdict_level", "herd_gpus",
                   "herd_gpu_health")
"""The families ``HealthCollector`` adds to ``/metrics``."""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float | int | bool) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(float(value)) if isinstance(value, float) else str(value)


def gpu_labels(view: NodeView, index: int, sample: Sample | None,
               reading: GpuReading | None) -> str:
    """dcgm-exporter's labels of one GPU (``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
    ``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``) and herdbook's ``node``."""
    info = next((g for g in view.info.gpus if g.index == index), None)
    uuid = (reading.uuid if reading is not None else "") or (info.uuid if info else "")
    model = (reading.model if reading is not None else None) or (info.name if info else "")
    driver = (reading.driver_version if reading is not None else None) or (
        info.driver_version if info else "")
    host = (sample.telemetry.hostname if sample is not None else "") or view.info.hostname
    pairs = (("gpu", str(index)), ("UUID", uuid), ("pci_bus_id",
             (reading.pci_bus_id if reading is not None else None) or ""),
             ("device", f"nvidia{index}"), ("modelName", model or ""), ("Hostname", host),
             ("DCGM_FI_DRIVER_VERSION", driver or ""), ("node", view.id))
    return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)


def node_lines(view: NodeView, sample: Sample | None) -> list[bytes]:
    """One node's samples of each family of ``GPU_FAMILIES``, in that order."""
    readings = {r.index: r for r in sample.telemetry.gpus} if sample is not None else {}
    indexes = sorted({g.index for g in view.info.gpus} | set(view.gpus) | set(readings))
    out: list[list[str]] = [[] for _ in GPU_FAMILIES]
    for index in indexes:
        reading = readings.get(index)
        labels = gpu_labels(view, index, sample, reading)
        if reading is not None:
            for slot, field in enumerate(DCGM_FIELDS):
                value = field.read(reading)
                if value is not None:
                    out[slot].append(f"{field.name}{{{labels}}} {_number(value)}\n")
            for link, up in enumerate(reading.nvlink_up or ()):
                out[-2].append(f'{NVLINK}{{{labels},link="{link}"}} {_number(up)}\n')
        level = LEVELS[gpu_level(view.health, view.gpus, index)]
        out[-1].append(f"{VERDICT}{{{labels}}} {level}\n")
    return ["".join(lines).encode() for lines in out]


def shard_of(node_id: str, shards: int) -> int:
    """A node's shard of ``shards``: stable across processes and restarts."""
    return zlib.crc32(node_id.encode()) % shards


CHUNK = 50
"""Nodes rendered between two returns to the event loop: 400 GPUs of 8-GPU nodes, ~15 ms
(30-40 µs of CPU per GPU)."""


class GpuExposition:
    """``/metrics/gpus``: the text, built at each scrape from the view and the latest
    samples, nothing kept. A cache of each node's lines would never hit at the agent's
    15 s samples and a 60 s scrape (every sample new), and held the whole page: ~1 GB
    at 10k nodes of 8 GPUs. ``chunks`` gives the event loop back every ``CHUNK`` nodes,
    so a scrape of the whole page does not stall heartbeat ingest for its seconds."""

    def __init__(self, nodes: Callable[[], Mapping[str, NodeView]], telemetry: SampleLookup) -> None:
        self.nodes = nodes
        self.telemetry = telemetry

    def render(self, shard: int = 0, shards: int = 1) -> bytes:
        """The page at once, without returning to the loop (tests, small fleets)."""
        page: list[bytes] = []
        for _ in self._steps(shard, shards, page):
            pass
        return b"".join(page)

    async def chunks(self, shard: int = 0, shards: int = 1) -> list[bytes]:
        """The page as its parts in order, the loop given back between ``CHUNK`` nodes
        (``MetricsServer`` writes them one by one, none joined into the whole page)."""
        page: list[bytes] = []
        for _ in self._steps(shard, shards, page):
            await asyncio.sleep(0)
        return page

    def _steps(self, shard: int, shards: int, page: list[bytes]) -> Iterator[None]:
        """Renders ``CHUNK`` nodes per step (each family's lines of those nodes joined),
        then fills ``page``. A node deleted between two steps is left out; each node's
        lines are of one view and one sample."""
        ids = sorted(n for n in self.nodes() if shards == 1 or shard_of(n, shards) == shard)
        families: list[list[bytes]] = [[] for _ in GPU_FAMILIES]
        for start in range(0, len(ids), CHUNK):
            nodes = self.nodes()
            per_node = [node_lines(view, self.telemetry.of(node_id))
                        for node_id in ids[start:start + CHUNK]
                        if (view := nodes.get(node_id)) is not None]
            for slot, parts in enumerate(families):
                parts.append(b"".join(lines[slot] for lines in per_node))
            yield
        for (name, kind, text), parts in zip(GPU_FAMILIES, families, strict=True):
            page.append(f"# HELP {name} {text}\n# TYPE {name} {kind}\n".encode())
            page.extend(part for part in parts if part)


def parse_shard(query: Mapping[str, str]) -> tuple[int, int]:
    """``shard`` and ``shards`` of a scrape's query; ValueError naming what is wrong."""
    try:
        shards = int(query.get("shards", "1"))
        shard = int(query.get("shard", "0"))
    except ValueError:
        raise ValueError("shard and shards are integers") from None
    if not 1 <= shards <= 4096 or not 0 <= shard < shards:
        raise ValueError(f"want 0 <= shard < shards <= 4096, got shard={shard} "
                         f"shards={shards}")
    return shard, shards


class HealthCollector(Collector):
    """herdbook's own health series on ``/metrics``, node-labelled: the state and
    verdict level of every node, GPUs counted by health, and one series per GPU that is
    not healthy (with its rule), so an alert can name the GPU. ``/metrics`` writes them
    with ``chunks`` (the loop given back between nodes); ``collect`` is the same at once."""

    def __init__(self, nodes: Callable[[], Mapping[str, NodeView]], telemetry: SampleLookup) -> None:
        self.nodes = nodes
        self.telemetry = telemetry

    def collect(self) -> Iterator[Metric]:
        nodes = self.nodes()
        counts: Counter[str] = Counter()
        state, level, bad = self._families(nodes, sorted(nodes), counts)
        yield state
        yield level
        yield _gpu_counts(counts)
        yield bad

    async def chunks(self) -> list[bytes]:
        """``collect``'s families as prometheus-client writes them (``generate_latest``),
        rendered ``CHUNK`` nodes at a time with the event loop given back between them: at
        10k nodes the whole takes ~0.25 s of CPU, which in one go would stall heartbeat
        ingest that long. A node deleted between two chunks is left out."""
        ids = sorted(self.nodes())
        counts: Counter[str] = Counter()
        texts: list[list[bytes]] = [[], [], []]
        for start in range(0, max(len(ids), 1), CHUNK):
            families = self._families(self.nodes(), ids[start:start + CHUNK], counts)
            for parts, family in zip(texts, families, strict=True):
                text = _rendered(family)    # its HELP and TYPE lines once, first
                parts.append(text if not parts else text.split(b"\n", 2)[2])
            await asyncio.sleep(0)
        state, level, bad = (b"".join(parts) for parts in texts)
        return [state, level, _rendered(_gpu_counts(counts)), bad]

    def _families(self, nodes: Mapping[str, NodeView], ids: list[str],
                  counts: Counter[str]) -> tuple[Metric, Metric, Metric]:
        """The state, verdict level and not-healthy GPU families of the nodes ``ids``
        (those still in ``nodes``), their GPUs counted by health into ``counts``."""
        state = GaugeMetricFamily(
            "herd_node_state", "1 per node, labelled with its state, health and pool.",
            labels=["node", "state", "health", "pool"])
        level = GaugeMetricFamily(
            "herd_node_verdict_level", "The node's verdict level: -1 unknown, 0 healthy, "
            "1 degraded, 2 unhealthy, 3 critical, 4 fatal.", labels=["node"])
        bad = GaugeMetricFamily(
            "herd_gpu_health", "The verdict level of each GPU that is not healthy "
            "(2 unhealthy, 3 critical, ...), labelled with its health and rule.",
            labels=["node", "gpu", "UUID", "Hostname", "modelName", "health", "rule"])
        for node_id in ids:
            view = nodes.get(node_id)
            if view is None:
                continue
            state.add_metric([node_id, view.state, view.health.value,
                              view.info.labels.get("pool", "")], 1)
            level.add_metric([node_id], LEVELS[node_level(view)])
            sample = self.telemetry.of(node_id)
            indexes = {g.index for g in view.info.gpus} | set(view.gpus)
            if sample is not None:
                indexes |= {r.index for r in sample.telemetry.gpus}
            for index in indexes:
                health = gpu_level(view.health, view.gpus, index)
                counts[health] += 1
                verdict = view.gpus.get(index)
                if verdict is None:
                    continue
                info = next((g for g in view.info.gpus if g.index == index), None)
                host = (sample.telemetry.hostname if sample is not None else "") or \
                    view.info.hostname
                bad.add_metric([node_id, str(index), info.uuid if info else "", host,
                                info.name if info else "", health, verdict.rule],
                               LEVELS[health])
        return state, level, bad


def _gpu_counts(counts: Counter[str]) -> Metric:
    gpus = GaugeMetricFamily("herd_gpus", "GPUs of the fleet by health.", labels=["health"])
    for word in LEVELS:
        gpus.add_metric([word], counts.get(word, 0))
    return gpus


class _One(Collector):
    def __init__(self, family: Metric) -> None:
        self.family = family

    def collect(self) -> Iterator[Metric]:
        yield self.family


def _rendered(family: Metric) -> bytes:
    """One family as ``generate_latest`` writes it in a page: its HELP, TYPE, samples."""
    return generate_latest(_One(family))


def exported_names() -> set[str]:
    """Every series name herdbook's GPU and health families write (the dashboard test)."""
    return {name for name, _, _ in GPU_FAMILIES} | set(HEALTH_FAMILIES)
