"""Prometheus text exposition (format 0.0.4) of the control plane, served on
``GET /metrics`` by a tiny asyncio HTTP server (``herd up --metrics-port``).

Gauges are read from the view and the sweeper at scrape time. Counters the control
plane keeps itself (API request durations, folded node events, wipe failures) count
since this control plane started: Prometheus expects counters to reset on a restart.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from nats.js.client import JetStreamContext

from herdbook.events.base import Event
from herdbook.events.node import NodeWipeFailed
from herdbook.events.states import Lifecycle
from herdbook.events.store import stream_last_seq
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector.node_view import NodeView
from herdbook.projector.runner import ProjectorRunner
from herdbook.reactors.sweeper import Sweeper

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
QUANTILES = (0.5, 0.99, 1.0)
# Silent on purpose or already counted as such: their growing age would pin the maximum.
_NOT_HEARTBEATING = frozenset({Lifecycle.DOWN, Lifecycle.TERMINATED})
REQUEST_TIMEOUT = 10.0

Sample = tuple[str, dict[str, str], float]
"""(name suffix such as ``_count`` or ``""``, labels, value)"""


@dataclass
class Family:
    name: str
    kind: str
    """gauge, counter, summary or histogram"""
    help: str
    samples: list[Sample] = field(default_factory=list)


class Histogram:
    def __init__(self, buckets: Sequence[float] = BUCKETS) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.sum += value
        self.count += 1

    def samples(self, labels: dict[str, str]) -> list[Sample]:
        out: list[Sample] = [("_bucket", {**labels, "le": format_value(bound)}, count)
                             for bound, count in zip(self.buckets, self.counts, strict=True)]
        out.append(("_bucket", {**labels, "le": "+Inf"}, self.count))
        out.append(("_sum", labels, self.sum))
        out.append(("_count", labels, self.count))
        return out


class Metrics:
    """What the control plane observes in-process, since it started."""

    def __init__(self) -> None:
        self.requests: dict[str, Histogram] = {}
        self.events: Counter[str] = Counter()
        self.wipe_failures = 0

    def observe_request(self, endpoint: str, seconds: float) -> None:
        histogram = self.requests.get(endpoint)
        if histogram is None:
            histogram = self.requests[endpoint] = Histogram()
        histogram.observe(seconds)

    def on_node_event(self, node_id: str, view: NodeView | None, event: Event) -> None:
        """A projector listener: called once for every node event folded."""
        self.events[str(type(event).__struct_config__.tag)] += 1
        if isinstance(event, NodeWipeFailed):
            self.wipe_failures += 1


def quantile(ordered: Sequence[float], q: float) -> float:
    """Nearest rank over sorted values; NaN when there are none (as client libraries do)."""
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def collect(metrics: Metrics, projector: ProjectorRunner, sweeper: Sweeper,
            stream_last: int | None) -> list[Family]:
    """Every family, read now. ``stream_last`` is None when NATS could not be asked."""
    nodes = Family("herd_nodes", "gauge", "Nodes in the view by state and class.")
    by_state = Counter((view.state, view.info.node_class.value)
                       for view in projector.views.values())
    nodes.samples = [("", {"state": state, "class": cls}, n)
                     for (state, cls), n in sorted(by_state.items())]

    ages = sorted(age for node_id, view in projector.views.items()
                  if view.lifecycle not in _NOT_HEARTBEATING
                  and (age := sweeper.heartbeat_age(node_id)) is not None)
    lag = Family("herd_heartbeat_lag_seconds", "summary",
                 "Seconds since each node's last heartbeat, over nodes neither DOWN nor "
                 "TERMINATED.")
    lag.samples = [("", {"quantile": format_value(q)}, quantile(ages, q)) for q in QUANTILES]
    lag.samples += [("_sum", {}, sum(ages)), ("_count", {}, len(ages))]

    families = [nodes, lag]
    if stream_last is not None:
        families.append(Family(
            "herd_projector_lag_events", "gauge",
            "Events in HERD_EVENTS not yet committed to the view.",
            [("", {}, max(0, stream_last - projector.committed_seq))]))
    families += [
        Family("herd_projector_committed_sequence", "gauge",
               "Last HERD_EVENTS sequence committed to the view.",
               [("", {}, projector.committed_seq)]),
        Family("herd_sweeper_detections_total", "counter",
               "Events the liveness sweeper appended since start.",
               [("", {}, sweeper.detections)]),
        Family("herd_heartbeat_replays_dropped_total", "counter",
               "Heartbeats dropped as replays (an old sequence number) since start.",
               [("", {}, sweeper.replays_dropped)]),
        Family("herd_heartbeats_dropped_total", "counter",
               "Heartbeats dropped since start, by why: a node the view does not know, or "
               "a boot its agent has not announced.",
               [("", {"reason": "unknown_node"}, sweeper.unknown_dropped),
                ("", {"reason": "unannounced_boot"}, sweeper.unannounced_dropped)]),
        Family("herd_deadletters_total", "counter",
               "Messages dead-lettered since start (undecodable, or a body its subject does "
               "not vouch for), by stream.",
               [("", {"stream": "HERD_EVENTS"}, projector.deadletters),
                ("", {"stream": "HERD_HEARTBEATS"}, sweeper.deadlettered)]),
        Family("herd_sensitive_wipe_failure_total", "counter",
               "node.wipe_failed events folded since this control plane started.",
               [("", {}, metrics.wipe_failures)]),
        Family("herd_events_total", "counter",
               "Node events folded since this control plane started, by type.",
               [("", {"type": tag}, n) for tag, n in sorted(metrics.events.items())]),
    ]
    requests = Family("herd_api_request_duration_seconds", "histogram",
                      "API request handling time by endpoint.")
    for endpoint, histogram in sorted(metrics.requests.items()):
        requests.samples += histogram.samples({"endpoint": endpoint})
    families.append(requests)
    return families


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def render(families: Sequence[Family]) -> str:
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for suffix, labels, value in family.samples:
            text = ",".join(f'{key}="{escape_label(val)}"' for key, val in labels.items())
            lines.append(f"{family.name}{suffix}{{{text}}} {format_value(value)}" if text
                         else f"{family.name}{suffix} {format_value(value)}")
    return "\n".join(lines) + "\n"


async def scrape(metrics: Metrics, projector: ProjectorRunner, sweeper: Sweeper,
                 js: JetStreamContext) -> str:
    """One exposition; asks NATS for the stream's last sequence once."""
    try:
        last: int | None = await stream_last_seq(js, EVENTS_STREAM)
    except Exception as err:  # noqa: BLE001 - NATS away: serve the rest without the lag
        log.debug("metrics: no stream info: %s", err)
        last = None
    return render(collect(metrics, projector, sweeper, last))


class MetricsServer:
    """``GET /metrics`` answers ``scrape()``; anything else is a 404. One request per
    connection (``Connection: close``)."""

    def __init__(self, host: str, port: int, scrape: Callable[[], Awaitable[str]]) -> None:
        self.host = host
        self.port = port
        self.scrape = scrape
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
            method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
            path = rest.split(" ", 1)[0].split("?", 1)[0]
            if method == "GET" and path == "/metrics":
                try:
                    status, body = "200 OK", (await self.scrape()).encode()
                except Exception as err:
                    log.exception("metrics scrape failed")
                    status, body = "500 Internal Server Error", f"{err!r}\n".encode()
            else:
                status, body = "404 Not Found", b"not found; try GET /metrics\n"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {CONTENT_TYPE}\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                         .encode() + body)
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                TimeoutError) as err:
            log.debug("metrics request dropped: %s", err)
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass
