"""Prometheus metrics: one registry per app (tests run several apps in one process).

* ``ledgerd_http_requests_total{method,route,status}`` and
  ``ledgerd_http_request_duration_seconds{method,route}`` for every request;
* ``ledgerd_add_latency_seconds{kind}`` (single/batch) and
  ``ledgerd_read_latency_seconds{kind}`` (single/range) around engine calls;
* ``ledgerd_streams_open``, ``ledgerd_stream_unacknowledged_bytes``,
  ``ledgerd_stream_messages_total`` and ``ledgerd_stream_ack_latency_seconds``
  (receipt of a message to the send of its ack) for append streams (§5a);
* ``ledgerd_password_checks_total{outcome}`` (ok/wrong/throttled), see
  ``app/admission.py``;
* ``ledgerd_bookie_<name>`` gauges read from ``Bookie.statistics()`` at scrape time,
  ``ledgerd_gc_<name>`` from the garbage collector and ``ledgerd_offload_<name>``
  from the offload service the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
)
_INVALID = re.compile(r"[^a-zA-Z0-9_]")


class _StatisticsCollector(Collector):
    def __init__(self, source: Callable[[], Mapping[str, float | int | bool]],
                 prefix: str) -> None:
        self._source = source
        self._prefix = prefix

    def collect(self) -> Iterator[Metric]:
        try:
            values = self._source()
        except Exception:  # the bookie may be closing; a scrape must not fail
            return
        for name, value in sorted(values.items()):
            if isinstance(value, bool | int | float):
                metric_name = f"ledgerd_{self._prefix}_" + _INVALID.sub("_", name)
                yield GaugeMetricFamily(metric_name, f"{self._prefix} statistic {name}",
                                        value=value)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "ledgerd_http_requests",
            "HTTP requests by route and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "ledgerd_http_request_duration_seconds",
            "HTTP request latency",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.add_seconds = Histogram(
            "ledgerd_add_latency_seconds",
            "Engine add latency until durable ack",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.read_seconds = Histogram(
            "ledgerd_read_latency_seconds",
            "Engine read latency",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._request_children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        # Children looked up once: ``labels()`` costs microseconds on every request.
        self.single_add_seconds = self.add_seconds.labels("single")
        self.batch_add_seconds = self.add_seconds.labels("batch")
        self.single_read_seconds = self.read_seconds.labels("single")
        self.range_read_seconds = self.read_seconds.labels("range")
        self.streams_open = Gauge(
            "ledgerd_streams_open", "Append streams open", registry=self.registry
        )
        self.stream_unacked_bytes = Gauge(
            "ledgerd_stream_unacknowledged_bytes",
            "Bytes of append stream messages received and not yet acknowledged",
            registry=self.registry,
        )
        self.stream_messages = Counter(
            "ledgerd_stream_messages", "Append stream messages received", registry=self.registry
        )
        self.stream_ack_seconds = Histogram(
            "ledgerd_stream_ack_latency_seconds",
            "Append stream message latency, from its receipt to the send of its ack",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.password_checks = Counter(
            "ledgerd_password_checks",
            "Password checks that went through the password gate: a wrong password or a "
            "first scrypt check (ok, wrong), or refused without a check (throttled: the "
            "client failed too often)",
            ["outcome"],
            registry=self.registry,
        )
        self._collectors: dict[str, _StatisticsCollector] = {}

    def watch(self, source: Callable[[], Mapping[str, float | int | bool]],
              prefix: str = "bookie") -> None:
        """Expose ``source()``'s values as ``ledgerd_<prefix>_<name>`` gauges,
        read at every scrape."""
        old = self._collectors.pop(prefix, None)
        if old is not None:
            self.registry.unregister(old)
        self._collectors[prefix] = _StatisticsCollector(source, prefix)
        self.registry.register(self._collectors[prefix])

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def request_metrics(self, method: str, route: str,
                        status: int) -> tuple[Counter, Histogram]:
        """The request counter's and duration histogram's children for a request,
        looked up once per (method, route template, status): a bounded set, since
        routes are templates ("unmatched" for any other path) and statuses few."""
        key = (method, route, status)
        children = self._request_children.get(key)
        if children is None:
            children = (self.requests.labels(method, route, str(status)),
                        self.request_seconds.labels(method, route))
            self._request_children[key] = children
        return children
