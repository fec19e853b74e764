"""Prometheus ``GET /metrics`` of the control plane (``herd up --metrics-port``), written
by prometheus-client in the text format 0.0.4.

What the view and the sweeper hold is read at scrape time by a custom collector
(``ControlPlaneCollector``) rather than mirrored into metric objects on every change; the
API request times are a prometheus-client ``Histogram``. Both live in a private
``CollectorRegistry`` per control plane (several run in one test process), never the
library's global one.

Served by the small asyncio server below, not ``prometheus_client.start_http_server``: that
one collects on its own thread while the projector and the sweeper change their dicts on
the event loop's, and the projector lag needs an awaited NATS request. Here a scrape awaits
that request, then collects and renders on the loop between two of its steps.

Counters the control plane keeps itself (API request durations, folded node events, wipe
failures) count since this control plane started: Prometheus expects counters to reset on
a restart.
"""

from __future__ import annotations

import asyncio
import logging
import math
import urllib.parse
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence

import prometheus_client
from nats.js.client import JetStreamContext
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from herdbook.events.base import Event
from herdbook.events.node import NodeWipeFailed
from herdbook.events.states import Lifecycle
from herdbook.events.store import stream_last_seq
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector.node_view import NodeView
from herdbook.projector.projection import ProjectorRunner
from herdbook.projector.score import fleet_score
from herdbook.reactors.breaker import Breaker
from herdbook.reactors.sweeper import Sweeper

log = logging.getLogger(__name__)

# The same families as before the library: no extra ``*_created`` series. A switch of the
# whole process, which is herd's own.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

# What generate_latest writes (its CONTENT_TYPE_LATEST names 1.0.0 in newer releases).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
QUANTILES = (0.5, 0.99, 1.0)
# Silent on purpose or already counted as such: their growing age would pin the maximum.
_NOT_HEARTBEATING = frozenset({Lifecycle.DOWN, Lifecycle.TERMINATED})
REQUEST_TIMEOUT = 10.0


class Metrics:
    """What the control plane observes in-process, since it started, and the registry
    ``/metrics`` renders."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Histogram("herd_api_request_duration_seconds",
                                  "API request handling time by endpoint.", ["endpoint"],
                                  buckets=BUCKETS, registry=self.registry)
        self.events: Counter[str] = Counter()
        self.wipe_failures = 0

    def observe_request(self, endpoint: str, seconds: float) -> None:
        self.requests.labels(endpoint).observe(seconds)

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


def _label(q: float) -> str:
    return str(int(q)) if q.is_integer() else repr(q)


def shard_families(sweeper: Sweeper) -> Iterator[Metric]:
    """Liveness shards (``control/shards.py``): how many this replica sweeps and, with
    more than one, which replica holds each (as this replica last read the leases)."""
    status = sweeper.shard_status()
    yield GaugeMetricFamily("herd_liveness_shards_held",
                            "Liveness shards whose heartbeats this replica reads and sweeps.",
                            len(status["liveness_shards_held"]))
    holders = GaugeMetricFamily("herd_liveness_shard_holder",
                                "1 for each liveness shard and the replica holding its lease.",
                                labels=["shard", "replica"])
    for shard, holder in sorted(status.get("liveness_shard_holders", {}).items()):
        if holder:
            holders.add_metric([shard, holder], 1)
    yield holders
    yield CounterMetricFamily("herd_heartbeats_accepted_total",
                              "Heartbeats this replica accepted since start (of the shards "
                              "it holds).", sweeper.accepted)


class ControlPlaneCollector(Collector):
    """Every family but the request histogram, read from the view, the sweeper and
    ``Metrics`` when collected. ``stream_last`` is HERD_EVENTS' last sequence as ``scrape``
    last asked NATS, None when it could not."""

    def __init__(self, metrics: Metrics, projector: ProjectorRunner, sweeper: Sweeper) -> None:
        self.metrics = metrics
        self.projector = projector
        self.sweeper = sweeper
        self.stream_last: int | None = None

    def collect(self) -> Iterator[Metric]:
        projector, sweeper, metrics = self.projector, self.sweeper, self.metrics
        nodes = GaugeMetricFamily("herd_nodes", "Nodes in the view by state and class.",
                                  labels=["state", "class"])
        by_state = Counter((view.state, view.info.node_class.value)
                           for view in projector.nodes.values())
        for (state, cls), n in sorted(by_state.items()):
            nodes.add_metric([state, cls], n)
        yield nodes

        ages = sorted(age for node_id, view in projector.nodes.items()
                      if view.lifecycle not in _NOT_HEARTBEATING
                      and (age := sweeper.heartbeat_age(node_id)) is not None)
        # SummaryMetricFamily has no quantiles: the samples are written out.
        lag = Metric("herd_heartbeat_lag_seconds",
                     "Seconds since each node's last heartbeat, over nodes neither DOWN nor "
                     "TERMINATED.", "summary")
        for q in QUANTILES:
            lag.add_sample(lag.name, {"quantile": _label(q)}, quantile(ages, q))
        lag.add_sample(f"{lag.name}_sum", {}, sum(ages))
        lag.add_sample(f"{lag.name}_count", {}, len(ages))
        yield lag

        if self.stream_last is not None:
            yield GaugeMetricFamily("herd_projector_lag_events",
                                    "Events in HERD_EVENTS not yet committed to the view.",
                                    max(0, self.stream_last - projector.committed_seq))
        yield GaugeMetricFamily("herd_projector_committed_sequence",
                                "Last HERD_EVENTS sequence committed to the view.",
                                projector.committed_seq)
        yield CounterMetricFamily("herd_sweeper_detections_total",
                                  "Events the liveness sweeper appended since start.",
                                  sweeper.detections)
        yield from shard_families(sweeper)
        conflicts = sweeper.agent_conflicts()
        yield GaugeMetricFamily("herd_agent_conflicts",
                                "Nodes for which two agents heartbeat now (one node id, two "
                                "processes: stop one; `herd node describe` names both).",
                                len(conflicts))
        conflicted = GaugeMetricFamily("herd_node_agent_conflict",
                                       "1 for each node two agents heartbeat for now.",
                                       labels=["node"])
        for node_id in sorted(conflicts):
            conflicted.add_metric([node_id], 1)
        yield conflicted
        yield CounterMetricFamily(
            "herd_heartbeat_replays_dropped_total",
            "Heartbeats dropped as replays (an old sequence number) since start.",
            sweeper.replays_dropped)
        dropped = CounterMetricFamily(
            "herd_heartbeats_dropped_total",
            "Heartbeats dropped since start, by why: a node the view does not know, or a boot "
            "its agent has not announced.", labels=["reason"])
        dropped.add_metric(["unknown_node"], sweeper.unknown_dropped)
        dropped.add_metric(["unannounced_boot"], sweeper.unannounced_dropped)
        yield dropped
        deadletters = CounterMetricFamily(
            "herd_deadletters_total",
            "Messages dead-lettered since start (undecodable, or a body its subject does not "
            "vouch for), by stream.", labels=["stream"])
        deadletters.add_metric(["HERD_EVENTS"], projector.deadletters)
        deadletters.add_metric(["HERD_HEARTBEATS"], sweeper.deadlettered)
        yield deadletters
        yield CounterMetricFamily("herd_sensitive_wipe_failure_total",
                                  "node.wipe_failed events folded since this control plane "
                                  "started.", metrics.wipe_failures)
        events = CounterMetricFamily("herd_events_total",
                                     "Node events folded since this control plane started, "
                                     "by type.", labels=["type"])
        for tag, n in sorted(metrics.events.items()):
            events.add_metric([tag], n)
        yield events


async def scrape(registry: CollectorRegistry, collector: ControlPlaneCollector,
                 js: JetStreamContext,
                 more: Callable[[], Awaitable[list[bytes]]] | None = None) -> list[bytes]:
    """One exposition; asks NATS for the stream's last sequence once, then collects the
    registry without awaiting, so each of its families is read at the same point of the
    loop; then ``more``'s families (the per-node health series, ``HealthCollector.
    chunks``: rendered a few nodes at a time, the loop given back between them)."""
    try:
        collector.stream_last = await stream_last_seq(js, EVENTS_STREAM)
    except Exception as err:  # noqa: BLE001 - NATS away: serve the rest without the lag
        log.debug("metrics: no stream info: %s", err)
        collector.stream_last = None
    return [generate_latest(registry), *(await more() if more is not None else [])]


Page = Callable[[dict[str, str]], Awaitable[bytes | list[bytes]]]
"""Another path's exposition, from the request's query (``/metrics/gpus``): the body or
its parts in order (written one by one, never joined: a page can be hundreds of MB); a
ValueError is a 400 with its message."""


class MetricsServer:
    """``GET /metrics`` answers ``scrape()``, the paths of ``pages`` theirs; anything else
    is a 404. One request per connection (``Connection: close``)."""

    def __init__(self, host: str, port: int,
                 scrape: Callable[[], Awaitable[bytes | list[bytes]]],
                 pages: dict[str, Page] | None = None) -> None:
        self.host = host
        self.port = port
        self.scrape = scrape
        self.pages = pages or {}
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
            path, _, query = rest.split(" ", 1)[0].partition("?")
            body: bytes | list[bytes]
            if method == "GET" and path in self.pages:
                try:
                    status, body = "200 OK", await self.pages[path](
                        dict(urllib.parse.parse_qsl(query)))
                except ValueError as err:
                    status, body = "400 Bad Request", f"{err}\n".encode()
                except Exception as err:
                    log.exception("metrics scrape of %s failed", path)
                    status, body = "500 Internal Server Error", f"{err!r}\n".encode()
            elif method == "GET" and path == "/metrics":
                try:
                    status, body = "200 OK", await self.scrape()
                except Exception as err:
                    log.exception("metrics scrape failed")
                    status, body = "500 Internal Server Error", f"{err!r}\n".encode()
            else:
                status, body = "404 Not Found", b"not found; try GET /metrics\n"
            parts = [body] if isinstance(body, bytes) else body
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {CONTENT_TYPE}\r\n"
                         f"Content-Length: {sum(map(len, parts))}\r\nConnection: close"
                         "\r\n\r\n".encode())
            for part in parts:
                writer.write(part)
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


class BreakerCollector(Collector):
    """The circuit breaker's families (``reactors/breaker.py``) and the fleet health score
    (``projector/score.py``), read when collected."""

    def __init__(self, breaker: Breaker, projector: ProjectorRunner,
                 waiting: Callable[[NodeView], bool] | None = None) -> None:
        self.breaker = breaker
        self.projector = projector
        self.waiting = waiting

    def collect(self) -> Iterator[Metric]:
        opened = GaugeMetricFamily("herd_breaker_open",
                                   "1 while the circuit breaker of a scope (fleet, pool:<name>) "
                                   "is open: automatic actions held.", labels=["scope"])
        for scope, tally in self.breaker.tallies().items():
            opened.add_metric([scope], 1 if tally.open else 0)
        yield opened
        yield CounterMetricFamily("herd_breaker_held_total",
                                  "node.action_held events folded since this control plane "
                                  "started.", self.breaker.held)
        score = fleet_score(self.projector.nodes.values(), self.waiting)
        yield GaugeMetricFamily("herd_fleet_health_score",
                                "Fleet health, 0-100: the mean of the two shares below.",
                                score.score)
        yield GaugeMetricFamily("herd_fleet_gpus_healthy_ratio",
                                "Share of GPUs on nodes up and not UNHEALTHY, DEGRADED or "
                                "VALIDATING.",
                                score.gpus_healthy)
        yield GaugeMetricFamily("herd_fleet_schedulable_ratio",
                                "Share of approved compute nodes the scheduler may use.",
                                score.schedulable)
        faults = GaugeMetricFamily("herd_fleet_open_faults", "Nodes with an open fault, by kind.",
                                   labels=["kind"])
        for kind in ("unhealthy", "degraded", "down", "failed", "quarantined", "drift"):
            faults.add_metric([kind], score.faults.get(kind, 0))
        yield faults
