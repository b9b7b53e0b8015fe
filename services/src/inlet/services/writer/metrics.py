"""The writer's Prometheus metrics (one registry per service instance)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inlet.services.runtime import ConsumerLag
from inlet.services.writer.load_ranges import read_progress


class WriterMetrics:
    def __init__(self, load_progress: Path | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        if load_progress is not None:
            r.register(InitialLoadMetrics(load_progress))
        self.records = Counter(
            "inlet_writer_records_written", "Change records committed", ["table", "op"], registry=r
        )
        self.commits = Counter("inlet_writer_commits", "Commits made", ["table"], registry=r)
        self.conflicts = Counter(
            "inlet_writer_conflicts", "Commits refused as conflicts", ["table"], registry=r
        )
        self.retries = Counter(
            "inlet_writer_retries",
            "Batches dropped and re-read from the table checkpoint",
            ["table"],
            registry=r,
        )
        self.failures = Counter(
            "inlet_writer_failures", "Failed writes by kind", ["table", "kind"], registry=r
        )
        self.batch_seconds = Histogram(
            "inlet_writer_batch_seconds",
            "Time to write and commit one batch",
            ["table"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=r,
        )
        self.batch_records = Histogram(
            "inlet_writer_batch_records",
            "Records per committed batch",
            ["table"],
            buckets=(1, 10, 100, 1000, 10000, 100000),
            registry=r,
        )
        self.freshness = Histogram(
            "inlet_writer_freshness_seconds",
            "Source commit (source_ts_ms) to Hudi commit, per record",
            ["table"],
            buckets=(0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600),
            registry=r,
        )
        self.last_freshness = Gauge(
            "inlet_writer_last_freshness_seconds",
            "Source commit to Hudi commit of the newest record of the last batch",
            ["table"],
            registry=r,
        )
        self.last_commit = Gauge(
            "inlet_writer_last_commit_timestamp_seconds",
            "When the table's last commit completed (Unix time): with lag above 0 and this old, the "
            "table is stalled (the freshness gauges move only on commits)",
            ["table"],
            registry=r,
        )
        self.lag = ConsumerLag(r, "writer")
        self.dead_letters = Counter(
            "inlet_writer_dead_letters", "Records sent to the dead-letter topic", ["table"], registry=r
        )
        self.stopped = Gauge(
            "inlet_writer_stopped_tables",
            "Tables stopped by a bad row (until the writer restarts)",
            registry=r,
        )
        self.paused = Gauge("inlet_writer_paused_tables", "Tables whose partitions are paused", registry=r)
        self.compactions = Counter("inlet_writer_compactions", "Compactions run", ["table"], registry=r)
        self.compaction_seconds = Histogram(
            "inlet_writer_compaction_seconds",
            "Time ingestion of a table was blocked by its compaction (schedule + run)",
            ["table"],
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
            registry=r,
        )
        self.buffered = Gauge(
            "inlet_writer_buffered_records", "Records waiting in batches", ["table"], registry=r
        )


class InitialLoadMetrics(Collector):
    """The initial load's progress per table, read from its progress file at every scrape (the load
    runs in another process: the stack's supervisor or ``inlet writer load``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def collect(self) -> Iterator[Metric]:
        rows = CounterMetricFamily(
            "inlet_writer_initial_load_rows", "Rows the initial load has read and committed", labels=["table"]
        )
        pages = GaugeMetricFamily(
            "inlet_writer_initial_load_pages", "Heap pages the initial load reads", labels=["table"]
        )
        done = GaugeMetricFamily(
            "inlet_writer_initial_load_pages_done", "Heap pages of committed ranges", labels=["table"]
        )
        rate = GaugeMetricFamily(
            "inlet_writer_initial_load_rows_per_second",
            "Rows per second since the load began",
            labels=["table"],
        )
        eta = GaugeMetricFamily(
            "inlet_writer_initial_load_eta_seconds",
            "Estimated seconds until the table is loaded (0 once loaded)",
            labels=["table"],
        )
        loaded = GaugeMetricFamily(
            "inlet_writer_initial_load_loaded",
            "1 once the table is loaded, 0 while it loads",
            labels=["table"],
        )
        for table, p in sorted(read_progress(self.path).items()):
            if p.get("state") not in ("loading", "loaded"):
                continue
            rows.add_metric([table], float(p.get("rows", 0)))
            pages.add_metric([table], float(p.get("pages", 0)))
            done.add_metric([table], float(p.get("pages_done", 0)))
            rate.add_metric([table], float(p.get("rows_per_s", 0)))
            finished = p["state"] == "loaded"
            if finished or p.get("eta_s") is not None:
                eta.add_metric([table], 0.0 if finished else float(p["eta_s"]))
            loaded.add_metric([table], 1.0 if finished else 0.0)
        yield from (rows, pages, done, rate, eta, loaded)
