"""Metrics endpoints of the disaggregated mode: one per trainer rank, one per worker.

A rank's batches come from the pool, so its numbers live in Python (the stream's consumer
accounting): it serves them with ``prometheus_client`` from a collector that reads the
stream at scrape time. A worker's numbers live in its C++ engine: it serves them with the
engine's own endpoint (``_headrace._MetricsServer``, the same exposition as a local
loader's), labelled ``role="worker"``, ``worker`` and ``node``.

Ports: with ``metrics_port=N`` (N > 0), rank r listens on N + r and worker w on
N + world_size + w, so that every process of a run on one machine (a test cluster, a
single big node) has its own; with 0, each picks a free port. ``Loader.metrics_endpoints()``
lists them all.
"""
from __future__ import annotations

import socket
from typing import Any, Dict, Optional, Tuple

from .. import _headrace


def rank_port(base: int, rank: int) -> int:
    return 0 if base == 0 else base + rank


def worker_port(base: int, world_size: int, worker: int) -> int:
    return 0 if base == 0 else base + world_size + worker


def node_address() -> str:
    """This node's address as Ray knows it (what another node reaches it by)."""
    try:
        import ray
        return ray.util.get_node_ip_address()
    except Exception:
        return socket.gethostname()


class _RankCollector:
    """prometheus_client collector of one rank's stream, read at scrape time."""

    def __init__(self, labels: Dict[str, str]):
        self._labels = labels
        self.stream = None
        self.last: Dict[str, Any] = {}

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        stream = self.stream
        s = stream.consumer_stats() if stream is not None else self.last
        keys = list(self._labels)
        values = [self._labels[k] for k in keys]

        def counter(name, doc, value):
            family = CounterMetricFamily(name, doc, labels=keys)
            family.add_metric(values, float(value))
            return family

        def gauge(name, doc, value):
            family = GaugeMetricFamily(name, doc, labels=keys)
            family.add_metric(values, float(value))
            return family

        yield counter("headrace_samples", "Samples delivered to the consumer.",
                      s.get("samples", 0))
        yield counter("headrace_batches", "Batches delivered to the consumer.",
                      s.get("batches", 0))
        yield counter("headrace_consumer_wait_seconds",
                      "Seconds the consumer waited for batches, cold start apart.",
                      s.get("wait_s", 0.0))
        yield gauge("headrace_wait_time_ratio",
                    "Share of the consumer's loop spent waiting for data, cold start apart.",
                    s.get("wait_time_ratio", 0.0))
        yield gauge("headrace_time_to_first_batch_seconds", "Cold start.",
                    s.get("time_to_first_batch_s", 0.0))
        yield gauge("headrace_elapsed_seconds", "Seconds since the stream started.",
                    s.get("elapsed_s", 0.0))
        errors = CounterMetricFamily("headrace_errors", "Samples skipped, by kind.",
                                     labels=keys + ["kind"])
        errors.add_metric(values + ["all"], float(s.get("samples_failed", 0)))
        yield errors
        yield counter("headrace_bytes_moved", "Batch bytes received from the workers.",
                      s.get("bytes_moved", 0))
        yield counter("headrace_reassignments",
                      "Batches requested again from another worker after a worker died.",
                      s.get("rank_reassignments", 0))
        by_worker = CounterMetricFamily("headrace_batches_by_worker",
                                        "Batches this rank received from each worker.",
                                        labels=keys + ["worker"])
        for worker, n in sorted((s.get("batches_by_worker") or {}).items()):
            by_worker.add_metric(values + [str(worker)], float(n))
        yield by_worker


class RankMetrics:
    """A trainer rank's endpoint: what ``headrace.Loader`` calls its metrics server
    (``attach(stream or None)``, ``url``, ``close()``)."""

    def __init__(self, host: str, port: int, labels: Dict[str, str]):
        from prometheus_client import CollectorRegistry, start_http_server
        self._collector = _RankCollector(labels)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self._collector)
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as e:
            raise _headrace.ConfigError(
                f"metrics endpoint {host}:{port}: cannot listen: {e.strerror or e} (is the "
                "port in use? choose another, or 0 for any free port)") from None
        shown = node_address() if host in ("", "0.0.0.0") else host
        self.port = self._server.server_port
        self.url = f"http://{shown}:{self.port}/metrics"

    def attach(self, stream) -> None:
        if stream is None and self._collector.stream is not None:
            self._collector.last = self._collector.stream.consumer_stats()
        self._collector.stream = stream

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            self._thread.join()


def start_worker_metrics(metrics: Optional[Tuple[str, int, int]], worker: int, impl):
    """The worker's endpoint, or None; ``metrics`` is (host, base port, world size)."""
    if metrics is None:
        return None, None
    host, base, world_size = metrics
    node = node_address()
    server = _headrace._MetricsServer(host, worker_port(base, world_size, worker),
                                      {"role": "worker", "worker": str(worker), "node": node})
    server.attach(impl)
    shown = node if host in ("", "0.0.0.0") else host
    return server, f"http://{shown}:{server.port}/metrics"
