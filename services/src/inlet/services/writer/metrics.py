"""The writer's Prometheus metrics (one registry per service instance)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inlet.services.runtime import ConsumerLag


class WriterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
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
