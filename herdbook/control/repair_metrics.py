"""The repair families of ``/metrics`` (docs/operating.md#metrics), read from the live
repair fold (``history/repairs_live.py``) when collected.

The histograms count every episode back in service that the event log holds: the fold
is seeded from the log at start, so a restart of the control plane neither resets nor
double counts them (a counter that only grows, as Prometheus expects; ``rate()`` over
them is the repairs finished per second). Until the seed read is done no repair family
is written (absent, not zero).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from herdbook.clock import Clock
from herdbook.history.repair_episodes import DURATIONS
from herdbook.history.repair_queries import availability
from herdbook.history.repairs_live import LiveRepairs

BUCKETS = (60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
           172800.0, 604800.0)
"""1 minute to 1 week: a GPU repair takes minutes (a reset) to days (an RMA)."""
WINDOW = timedelta(days=7)
HELP = {
    "time_to_quarantine": "Seconds from a fault's first sign to the node out of service.",
    "time_to_drain": "Seconds from the node out of service to drained.",
    "time_in_repair": "Seconds from the node out of service to back in service.",
    "mttr": "Seconds from a fault's first sign to the node back in service (MTTR).",
}


class RepairCollector(Collector):
    def __init__(self, live: LiveRepairs, clock: Clock) -> None:
        self.live = live
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        if not self.live.ready:
            return
        state = self.live.state
        # (duration, pool, kind) -> values
        values: dict[tuple[str, str, str], list[float]] = {}
        for episode in state.closed:
            if episode.outcome != "back":
                continue
            for name, seconds in episode.durations().items():
                if seconds is not None:
                    values.setdefault((name, episode.pool, episode.kind), []).append(seconds)
        for name in DURATIONS:
            family = HistogramMetricFamily(f"herd_repair_{name}_seconds", HELP[name],
                                           labels=["pool", "kind"])
            for (metric, pool, kind), seen in sorted(values.items()):
                if metric != name:
                    continue
                buckets = [(_le(bound), float(sum(1 for v in seen if v <= bound)))
                           for bound in BUCKETS]
                family.add_metric([pool, kind], [*buckets, ("+Inf", float(len(seen)))],
                                  sum(seen))
            yield family
        opened = GaugeMetricFamily("herd_repair_open_episodes",
                                   "Fault episodes not yet back in service, by pool and kind.",
                                   labels=["pool", "kind"])
        counts: dict[tuple[str, str], int] = {}
        for episode in state.open.values():
            key = (episode.pool, episode.kind)
            counts[key] = counts.get(key, 0) + 1
        for (pool, kind), n in sorted(counts.items()):
            opened.add_metric([pool, kind], n)
        yield opened
        now = self.clock.now()
        avail = availability(state, now - WINDOW, now)
        fleet = GaugeMetricFamily("herd_fleet_availability_ratio",
                                  "GPU-hours in service / GPU-hours owned over the last 7 days "
                                  "(node-hours where no GPU is owned).")
        if avail["availability"] is not None:
            fleet.add_metric([], avail["availability"])
        yield fleet
        pools = GaugeMetricFamily("herd_pool_availability_ratio",
                                  "herd_fleet_availability_ratio of each pool.", labels=["pool"])
        for pool, row in avail["pools"].items():
            if row["availability"] is not None:
                pools.add_metric([pool], row["availability"])
        yield pools


def _le(bound: float) -> str:
    return str(int(bound)) + ".0" if bound.is_integer() else repr(bound)
