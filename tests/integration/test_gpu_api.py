"""The GPU health API and metrics against a real nats-server and control plane (issue 27
items 3 and 4).

Given a READY node with 4 GPUs, when its agent's telemetry (``herd.gpu.<node>``) and a
health report with XID 48 on GPU 3 arrive, then `herd gpu list -o json`, `herd gpu
describe n1/3`, `herd node describe`, GET /v1/gpus and /v1/nodes/{id}/gpus name GPU 3
critical with its cause and readings; /metrics has the node and GPU health series and
/metrics/gpus dcgm-exporter's series and labels, which every query of the Grafana
dashboard names; garbage on herd.gpu.* is dead-lettered and telemetry of an unknown node
keeps nothing. After a restart, the verdict (the view) and the readings (the stored
sample) are back."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.plane import ControlPlane
from herdbook.events.codec import encode
from herdbook.events.health_report import GpuEvent, HealthReport
from herdbook.events.node import GpuInfo, NodeApproved, NodeBootChecked, NodeInfo, NodeRegistered
from herdbook.events.store import EventStore
from herdbook.events.subjects import HEALTH_STREAM, HEARTBEATS_STREAM, telemetry_subject
from herdbook.events.telemetry import GpuReading, GpuTelemetry
from herdbook.natsd.embedded import EmbeddedNats
from tests.conftest import free_port, herd, poll
from tests.unit.test_gpu_metrics import dashboard_queries, series_of

TIMEOUT = 60.0


async def http_get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                 .encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 20)
    writer.close()
    await writer.wait_closed()
    head, _, body = raw.decode().partition("\r\n\r\n")
    if "chunked" in head.lower():   # aiohttp may chunk: join the chunks
        out, rest = [], body
        while rest:
            size, _, rest = rest.partition("\r\n")
            if not int(size, 16):
                break
            out.append(rest[:int(size, 16)])
            rest = rest[int(size, 16) + 2:]
        body = "".join(out)
    return int(head.split()[1]), body


def telemetry(node_id: str = "n1") -> GpuTelemetry:
    return GpuTelemetry(node_id=node_id, boot_id="b1", sampled_at=1_800_000_000.0,
                        hostname="dgx-01", gpus=tuple(
                            GpuReading(index=i, uuid=f"GPU-n1-{i}", serial=f"SN{i}",
                                       model="NVIDIA H100 80GB HBM3",
                                       pci_bus_id=f"00000000:{i:02x}:00.0",
                                       driver_version="550.54.15", temperature_c=60.0 + i,
                                       power_w=300.0 + i, gpu_util_pct=90.0,
                                       fb_used_mib=1000.0, fb_total_mib=81559.0,
                                       sm_clock_mhz=1980, ecc_dbe_volatile=0)
                            for i in range(4)))


def plane_of(nats_server: EmbeddedNats, data: Path, metrics_port: int,
             http_port: int) -> ControlPlane:
    return bootstrap(parse_config(
        f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{data}'\nnode_id: cp-gpus\n"
        f"metrics: {{port: {metrics_port}}}\nhttp: {{port: {http_port}}}\n"),
        clock=SYSTEM_CLOCK)


async def cli(*args: str, server: str) -> Any:
    result = await asyncio.to_thread(herd, *args, server=server, timeout=TIMEOUT)
    assert result.returncode == 0, (args, result.stderr)
    return json.loads(result.stdout)


async def test_gpu_list_describe_http_and_metrics_name_the_gpu_and_its_cause(
        nats_server: EmbeddedNats, tmp_path: Path) -> None:
    metrics_port, http_port = free_port(), free_port()
    plane = plane_of(nats_server, tmp_path / "d", metrics_port, http_port)
    await plane.start()
    try:
        nc = plane.nc
        js = nc.jetstream()
        store = EventStore(nc)
        info = NodeInfo(hostname="dgx-01", labels={"pool": "h100"}, gpus=[
            GpuInfo(index=i, uuid=f"GPU-n1-{i}", name="NVIDIA H100 80GB HBM3")
            for i in range(4)])
        await store.append(NodeRegistered(node_id="n1", boot_id="b1", info=info))
        await store.append(NodeApproved(node_id="n1"))
        seq = await store.append(NodeBootChecked(node_id="n1", boot_id="b1", passed=True))
        await plane.projector.wait_applied(seq)

        # when: the agent's telemetry, garbage, an unknown node's, and a critical XID
        await js.publish(telemetry_subject("n1"), encode(telemetry()), stream=HEARTBEATS_STREAM)
        await js.publish(telemetry_subject("n1"), b'{"not":"telemetry"}',
                         stream=HEARTBEATS_STREAM)
        await js.publish(telemetry_subject("n1"), encode(telemetry()), stream=HEARTBEATS_STREAM)
        await js.publish(telemetry_subject("ghost"), encode(telemetry("ghost")),
                         stream=HEARTBEATS_STREAM)
        await js.publish("herd.health.n1", encode(HealthReport(
            report_id="r1", node_id="n1", boot_id="b1",
            events=(GpuEvent(kind="xid", gpu=3, xid=48),))), stream=HEALTH_STREAM)
        intake = plane.api.gpus.telemetry
        await poll(lambda: plane.projector.nodes["n1"].gpus.get(3), TIMEOUT, "GPU 3's verdict")
        await poll(lambda: intake.of("n1") is not None, TIMEOUT, "n1's telemetry")

        # then: the CLI
        server = nats_server.url
        gpus = await cli("gpu", "list", "-o", "json", server=server)
        assert [(g["node_id"], g["index"]) for g in gpus] == [("n1", i) for i in range(4)]
        bad = gpus[3]
        assert (bad["health"], bad["cause"], bad["temperature_c"], bad["serial"]) == (
            "critical", "critical-xid: XID 48 on GPU 3", 63.0, "SN3")
        assert {g["health"] for g in gpus[:3]} == {"healthy"}
        critical = await cli("gpu", "list", "--health", "critical", "-l", "pool=h100",
                             "-o", "json", server=server)
        assert [g["index"] for g in critical] == [3]
        detail = await cli("gpu", "describe", "n1/3", "-o", "json", server=server)
        assert detail["verdict"]["rule"] == "critical-xid" and detail["verdict"]["xid"] == 48
        assert [(f["kind"], f["xid"]) for f in detail["faults"]] == [("xid", 48)]
        assert detail["fault_counts"]["24h"] == {"xid 48": 1}
        assert detail["readings"]["sm_clock_mhz"] == 1980 and detail["serial_seen_on"] == ["n1"]
        assert [p["node_id"] for p in detail["serial_pulls"]] == ["n1"]
        missing = await asyncio.to_thread(herd, "gpu", "describe", "n1/7", server=server)
        assert missing.returncode == 1 and "has no GPU 7" in missing.stderr
        described = await cli("node", "describe", "n1", "-o", "json", server=server)
        assert [(g["index"], g["health"]) for g in described["gpu_health"]] == [
            (0, "healthy"), (1, "healthy"), (2, "healthy"), (3, "critical")]

        # then: HTTP and the OpenAPI document
        status, body = await http_get(http_port, "/v1/gpus?health=critical")
        assert status == 200, body
        assert [(g["node_id"], g["index"]) for g in json.loads(body)["items"]] == [("n1", 3)]
        status, body = await http_get(http_port, "/v1/nodes/n1/gpus")
        assert status == 200 and len(json.loads(body)["items"]) == 4
        status, body = await http_get(http_port, "/v1/gpus/n1/3")
        assert status == 200 and json.loads(body)["verdict"]["level"] == "critical"
        status, body = await http_get(http_port, "/openapi.json")
        assert {"/v1/gpus", "/v1/nodes/{node_id}/gpus"} <= set(json.loads(body)["paths"])

        # then: the metrics
        status, text = await http_get(metrics_port, "/metrics")
        assert status == 200
        assert re.search(r'herd_gpu_health\{[^}]*gpu="3"[^}]*health="critical"[^}]*\} 3\.0', text)
        assert 'herd_node_verdict_level{node="n1"} 3.0' in text
        assert 'herd_node_state{health="UNHEALTHY",node="n1",pool="h100",state="UNHEALTHY"} 1.0' \
            in text
        status, gpu_text = await http_get(metrics_port, "/metrics/gpus")
        assert status == 200
        assert ('DCGM_FI_DEV_GPU_TEMP{gpu="3",UUID="GPU-n1-3",pci_bus_id="00000000:03:00.0",'
                'device="nvidia3",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-01",'
                'DCGM_FI_DRIVER_VERSION="550.54.15",node="n1"} 63.0') in gpu_text
        assert (await http_get(metrics_port, "/metrics/gpus?shards=0"))[0] == 400
        # every family the two pages declare (a reading no GPU has here is declared too)
        scraped = set(re.findall(r"(?m)^# TYPE (\S+) ", text + gpu_text))
        for expr in dashboard_queries():
            for name in series_of(expr):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                assert name in scraped or base in scraped, \
                    f"dashboard query {expr!r}: {name} not served"

        # the garbage was dead-lettered, the unknown node kept nothing
        assert intake.deadlettered == 1 and intake.of("ghost") is None
    finally:
        await plane.stop()

    # after a restart: the verdict from the view, the readings from the stored sample
    plane = plane_of(nats_server, tmp_path / "d", free_port(), free_port())
    await plane.start()
    try:
        gpus = await cli("gpu", "list", "--node", "n1", "-o", "json", server=nats_server.url)
        assert (gpus[3]["health"], gpus[3]["temperature_c"]) == ("critical", 63.0)
    finally:
        await plane.stop()
