"""Prometheus metrics: one registry per app (several apps may share a process in tests).

Counters and histograms are updated once per request when it finishes; gauges that mirror live
state (queue depth, backend health, in-flight, breaker) are read at scrape time from the routing
state, so the hot path pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mindrouter.routing.catalog import Catalog

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0015, 0.0025, 0.005, 0.01, 0.025, 0.1)
BREAKER_CODES = {"closed": 0, "half_open": 1, "open": 2}

M = TypeVar("M", Counter, Histogram)


class Family(Generic[M]):
    """A labelled metric whose children are kept by their label values: the client's own
    `labels()` checks and converts its arguments and takes a lock on every call (about 2 µs,
    several times a request); here a known child is one dict lookup. The client keeps every
    child it made anyway, so keeping them here bounds nothing new."""

    __slots__ = ("_children", "metric")

    def __init__(self, metric: M) -> None:
        self.metric: M = metric
        self._children: dict[tuple[str, ...], M] = {}

    def labels(self, *values: str) -> M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


class _LiveState(Collector):
    def __init__(
        self,
        catalog: Catalog,
        queue_depth: Callable[[], dict[str, int]],
        clock: Callable[[], float],
    ) -> None:
        self.catalog = catalog
        self.queue_depth = queue_depth
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        healthy = GaugeMetricFamily(
            "mindrouter_backend_healthy",
            "1 when the backend passes health checks",
            labels=["backend"],
        )
        draining = GaugeMetricFamily(
            "mindrouter_backend_draining", "1 while an admin drains the backend", labels=["backend"]
        )
        in_flight = GaugeMetricFamily(
            "mindrouter_backend_in_flight",
            "requests this process has on the backend",
            labels=["backend"],
        )
        breaker = GaugeMetricFamily(
            "mindrouter_backend_breaker_state", "0 closed, 1 half-open, 2 open", labels=["backend"]
        )
        for b in self.catalog.backends:
            healthy.add_metric([b.name], 1.0 if b.healthy else 0.0)
            draining.add_metric([b.name], 1.0 if b.draining else 0.0)
            in_flight.add_metric([b.name], float(b.in_flight))
            breaker.add_metric([b.name], float(BREAKER_CODES[b.breaker.state(now)]))
        depth = GaugeMetricFamily(
            "mindrouter_queue_depth", "requests waiting for capacity", labels=["model"]
        )
        for model, n in sorted(self.queue_depth().items()):
            depth.add_metric([model], float(n))
        yield from (healthy, draining, in_flight, breaker, depth)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry

        def counter(name: str, doc: str, labels: list[str]) -> Family[Counter]:
            return Family(Counter(name, doc, labels, registry=r))

        def histogram(
            name: str, doc: str, labels: list[str], buckets: tuple[float, ...] = LATENCY_BUCKETS
        ) -> Family[Histogram]:
            return Family(Histogram(name, doc, labels, buckets=buckets, registry=r))

        self.requests = counter(
            "mindrouter_requests",
            "requests finished, by outcome",
            ["dialect", "model", "backend", "status"],
        )
        self.errors = counter(
            "mindrouter_request_errors",
            "requests that failed, by error kind",
            ["dialect", "model", "kind"],
        )
        self.latency = histogram(
            "mindrouter_request_duration_seconds",
            "time from receipt to the last byte",
            ["dialect", "model"],
        )
        self.ttft = histogram(
            "mindrouter_time_to_first_token_seconds",
            "time from receipt to the first token",
            ["model", "backend"],
        )
        self.queue_wait = histogram(
            "mindrouter_queue_wait_seconds", "time spent waiting for capacity", ["model"]
        )
        self.tokens = counter("mindrouter_tokens", "tokens accounted", ["model", "direction"])
        self.overhead = histogram(
            "mindrouter_gateway_overhead_seconds",
            "time the gateway itself spent before handing the request to a backend "
            "(queue wait excluded)",
            ["dialect"],
            buckets=OVERHEAD_BUCKETS,
        )
        self.limits_degraded = Counter(
            "mindrouter_limits_degraded",
            "limit checks answered from local counters because Redis was unreachable",
            registry=r,
        )

    def watch(
        self,
        catalog: Catalog,
        queue_depth: Callable[[], dict[str, int]],
        clock: Callable[[], float],
    ) -> None:
        self.registry.register(_LiveState(catalog, queue_depth, clock))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
