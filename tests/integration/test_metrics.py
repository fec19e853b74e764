"""Prometheus /metrics: the text rendering, and a real control plane scraped over HTTP."""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.metrics import Metrics, quantile
from herdbook.events.node import NodeBootChecked, NodeInfo, NodeRegistered, NodeWipeFailed
from herdbook.events.states import NodeClass
from herdbook.events.store import EventStore
from herdbook.natsd.embedded import EmbeddedNats
from tests.conftest import free_port


def test_exposition_writes_help_and_type_and_escapes_labels() -> None:
    class Things(Collector):
        def collect(self) -> Iterator[Metric]:
            family = Metric("herd_things", "Things.\nBy kind \\ shape.", "gauge")
            family.add_sample("herd_things", {"kind": 'say "hi"\\\n'}, 2)
            family.add_sample("herd_things", {}, 0.25)
            yield family

    registry = CollectorRegistry()
    registry.register(Things())
    assert generate_latest(registry).decode().splitlines() == [
        "# HELP herd_things Things.\\nBy kind \\\\ shape.",
        "# TYPE herd_things gauge",
        'herd_things{kind="say \\"hi\\"\\\\\\n"} 2.0',
        "herd_things 0.25",
    ]


def test_histogram_buckets_are_cumulative_and_end_in_inf() -> None:
    metrics = Metrics()
    for seconds in (0.005, 0.05, 0.05, 3.0):
        metrics.observe_request("status", seconds)
    text = generate_latest(metrics.registry).decode()
    h = "herd_api_request_duration_seconds"
    assert f'{h}_bucket{{endpoint="status",le="0.01"}} 1' in text
    assert f'{h}_bucket{{endpoint="status",le="0.1"}} 3' in text
    assert f'{h}_bucket{{endpoint="status",le="+Inf"}} 4' in text
    assert f'{h}_count{{endpoint="status"}} 4' in text
    assert f'{h}_sum{{endpoint="status"}} 3.105' in text


def test_quantiles_by_nearest_rank() -> None:
    ages = [float(i) for i in range(1, 101)]
    assert (quantile(ages, 0.5), quantile(ages, 0.99), quantile(ages, 1.0)) == (50.0, 99.0, 100.0)
    assert quantile([7.0], 0.5) == 7.0
    assert math.isnan(quantile([], 0.5))


async def http_get(port: int, path: str) -> tuple[int, str, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    await writer.wait_closed()
    head, _, body = raw.decode().partition("\r\n\r\n")
    status = int(head.split()[1])
    content_type = re.search(r"(?im)^content-type: (.*)\r?$", head)
    return status, content_type.group(1) if content_type else "", body


def series_key(series: str) -> tuple[str, frozenset[tuple[str, str]]]:
    """A series' name and label set: prometheus-client writes labels sorted by name."""
    name, _, labels = series.partition("{")
    return name, frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels))


def sample(text: str, series: str) -> float | None:
    wanted = series_key(series)
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if not line.startswith("#") and series_key(name) == wanted:
            return float(value)
    return None


async def scrape_until(port: int, series: str, wanted: float, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        _, _, text = await http_get(port, "/metrics")
        value = sample(text, series)
        if value is not None and value >= wanted:
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"{series} never reached {wanted}:\n{text}")
        await asyncio.sleep(0.1)


async def test_control_plane_serves_metrics(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    port = free_port()
    config = parse_config(f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\n"
                          f"node_id: cp-metrics\nmetrics: {{port: {port}}}\n")
    plane = bootstrap(config, clock=SYSTEM_CLOCK)
    info = await plane.start()
    try:
        assert info["metrics_url"] == f"http://127.0.0.1:{port}/metrics"
        assert plane.nc is not None and plane.projector is not None

        # given: this control plane's own requester node, READY
        status, content_type, text = await http_get(port, "/metrics")
        assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
        assert sample(text, 'herd_nodes{state="READY",class="standard"}') == 1
        for name, kind in [("herd_nodes", "gauge"), ("herd_heartbeat_lag_seconds", "summary"),
                           ("herd_projector_lag_events", "gauge"),
                           ("herd_projector_committed_sequence", "gauge"),
                           ("herd_sweeper_detections_total", "counter"),
                           ("herd_heartbeat_replays_dropped_total", "counter"),
                           ("herd_deadletters_total", "counter"),
                           ("herd_heartbeats_dropped_total", "counter"),
                           ("herd_sensitive_wipe_failure_total", "counter"),
                           ("herd_events_total", "counter"),
                           ("herd_api_request_duration_seconds", "histogram")]:
            assert f"# TYPE {name} {kind}\n" in text and f"# HELP {name} " in text
        assert sample(text, "herd_sensitive_wipe_failure_total") == 0
        assert sample(text, 'herd_deadletters_total{stream="HERD_EVENTS"}') == 0
        assert sample(text, 'herd_heartbeats_dropped_total{reason="unknown_node"}') == 0
        assert sample(text, "herd_projector_committed_sequence") == plane.projector.committed_seq
        await scrape_until(port, "herd_heartbeat_lag_seconds_count", 1)

        # when: an API request
        reply = await plane.nc.request("herd.api.v1.status", b"{}", timeout=10)
        assert b'"ok":true' in reply.data
        # then: it is in the histogram, in every bucket from 5s up (prometheus-client
        # writes the bound as a float: le="5.0")
        text = await scrape_until(
            port, 'herd_api_request_duration_seconds_count{endpoint="status"}', 1)
        assert sample(text, 'herd_api_request_duration_seconds_bucket{endpoint="status",le="5.0"}') == 1
        assert sample(text,
                      'herd_api_request_duration_seconds_bucket{endpoint="status",le="+Inf"}') == 1

        # when: a registered sensitive node's wipe fails
        store = EventStore(plane.nc)
        await store.append(NodeRegistered(node_id="gpu-s1", boot_id="b1",
                                          info=NodeInfo(node_class=NodeClass.SENSITIVE)))
        await store.append(NodeBootChecked(node_id="gpu-s1", boot_id="b1", passed=True))
        seq = await store.append(NodeWipeFailed(node_id="gpu-s1", reason="disk busy",
                                                step="nvme"))
        await plane.projector.wait_applied(seq)
        # then: counted once, and the node is in herd_nodes under its class
        _, _, text = await http_get(port, "/metrics")
        assert sample(text, "herd_sensitive_wipe_failure_total") == 1
        assert sample(text, 'herd_events_total{type="node.wipe_failed"}') == 1
        # (the requester's own registration came after the catch-up: it counts too)
        assert sample(text, 'herd_events_total{type="node.registered"}') == 2
        assert any(line.startswith("herd_nodes{") and 'class="sensitive"' in line
                   and float(line.rpartition(" ")[2]) == 1 for line in text.splitlines()), text
        assert sample(text, "herd_projector_lag_events") is not None

        # anything but GET /metrics is a 404
        assert (await http_get(port, "/"))[0] == 404
        assert (await http_get(port, "/metrics/x"))[0] == 404
    finally:
        await plane.stop()
    # stopped: the port is closed
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        pass
    else:
        writer.close()
        raise AssertionError("the metrics port is still open after stop()")


async def test_no_metrics_port_serves_nothing(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    config = parse_config(f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\n"
                          "node_id: cp-quiet\n")
    plane = bootstrap(config, clock=SYSTEM_CLOCK)
    info = await plane.start()
    try:
        assert info["metrics_url"] is None
        assert plane.metrics is None and plane.metrics_server is None
        assert plane.api is not None and plane.api.metrics is None
    finally:
        await plane.stop()
