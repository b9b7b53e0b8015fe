"""The service as a real process (``inlet cdc run``): SIGKILL mid-stream loses nothing; SIGTERM commits."""

from __future__ import annotations

import itertools
import os
import signal
from collections import Counter
from pathlib import Path

from cdc_helpers import (
    InRecord,
    cli_run_args,
    committed,
    metric_value,
    produce,
    read_all,
    recorded,
    scrape,
    serving_address,
    spawn_cli,
    stop_process,
    unique_prefix,
    wait_for,
)

from inlet.services.stack import EmbeddedKafka


def _stream(prefix: str, n: int) -> tuple[list[InRecord], list[str]]:
    """``n`` real change records (customers and orders, decodable), cycled; returns them and the topics."""
    recs = [
        r for r in recorded(prefix) if r.value is not None and r.key is not None and ".public." in r.topic
    ]
    recs = [r for r in recs if b'"op":"t"' not in (r.value or b"")]
    topics = sorted({r.topic for r in recs})
    return list(itertools.islice(itertools.cycle(recs), n)), topics


def _source_offsets(records: list[InRecord]) -> set[tuple[str, int]]:
    counts: Counter[str] = Counter()
    out = set()
    for r in records:
        out.add((r.topic, counts[r.topic]))
        counts[r.topic] += 1
    return out


def _outputs(bootstrap: str, topics: list[str], min_count: int) -> list:  # type: ignore[type-arg]
    # a table none of whose changes was relayed before a stop has no output topic yet
    # read after the service stopped: every output (and duplicate) is on the broker already, so a
    # second with nothing new is enough to know none is left
    return read_all(
        bootstrap,
        [f"inlet.changes.{t}" for t in topics],
        min_count=min_count,
        idle_s=1.0,
        timeout_s=120,
        require_all_topics=False,
    )


def test_sigkill_mid_stream_then_restart_loses_nothing(kafka_server: EmbeddedKafka, tmp_path: Path) -> None:
    prefix = unique_prefix()
    records, topics = _stream(prefix, 2000)
    for t in topics:
        kafka_server.create_topic(t, partitions=1)
    produce(kafka_server.bootstrap, records)
    expected = _source_offsets(records)
    # slow enough to be killed mid-stream: few records in flight, each batch waits for its acks
    args = cli_run_args(
        kafka_server.bootstrap,
        prefix,
        topics,
        "--batch-size",
        "20",
        "--max-pending",
        "40",
        "--linger-ms",
        "30",
        "--commit-interval-ms",
        "200",
    )
    log1 = tmp_path / "run1.log"
    proc = spawn_cli(args, log1)
    try:
        address = serving_address(proc, log1)
        wait_for(
            lambda: (metric_value(scrape(address), "inlet_cdc_offset_commits_total", result="ok") or 0) >= 2
        )
        consumed = sum(
            metric_value(scrape(address), "inlet_cdc_events_in_total", topic=t) or 0 for t in topics
        )
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        stop_process(proc)
    assert 0 < consumed < len(records), "not killed mid-stream"
    group = "cdc-" + prefix
    committed1 = {t: max(0, committed(kafka_server.bootstrap, group, t)[0]) for t in topics}
    assert sum(max(0, c) for c in committed1.values()) < len(records)

    log2 = tmp_path / "run2.log"
    proc = spawn_cli([*args[:-8], "--commit-interval-ms", "200"], log2)  # full speed now
    try:
        serving_address(proc, log2)
        wait_for(
            lambda: all(
                committed(kafka_server.bootstrap, group, t)[0] == n
                for t, n in Counter(r.topic for r in records).items()
            ),
            timeout_s=120,
            every_s=0.3,
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        stop_process(proc)
    out = _outputs(kafka_server.bootstrap, topics, len(expected))
    got = Counter((o.source[0], o.source[2]) for o in out)
    assert set(got) == expected  # every input change came out at least once
    # duplicates only from the uncommitted tail of the killed run
    for (t, off), n in got.items():
        if n > 1:
            assert off >= committed1[t], (t, off, n)


def test_sigterm_commits_and_a_restart_repeats_nothing(kafka_server: EmbeddedKafka, tmp_path: Path) -> None:
    prefix = unique_prefix()
    records, topics = _stream(prefix, 1000)
    for t in topics:
        kafka_server.create_topic(t, partitions=1)
    produce(kafka_server.bootstrap, records)
    expected = _source_offsets(records)
    args = cli_run_args(
        kafka_server.bootstrap,
        prefix,
        topics,
        "--batch-size",
        "20",
        "--max-pending",
        "40",
        "--linger-ms",
        "30",
        "--commit-interval-ms",
        "60000",
    )
    group = "cdc-" + prefix
    log1 = tmp_path / "run1.log"
    proc = spawn_cli(args, log1)
    try:
        address = serving_address(proc, log1)
        wait_for(
            lambda: (
                sum(metric_value(scrape(address), "inlet_cdc_events_in_total", topic=t) or 0 for t in topics)
                >= 200
            )
        )
        proc.send_signal(signal.SIGTERM)  # mid-stream; no periodic commit has happened yet
        assert proc.wait(30) == 0
    finally:
        stop_process(proc)
    committed1 = {t: max(0, committed(kafka_server.bootstrap, group, t)[0]) for t in topics}
    assert 0 < sum(committed1.values()) < len(records)
    first = _outputs(kafka_server.bootstrap, topics, sum(committed1.values()))
    first_sources = Counter((o.source[0], o.source[2]) for o in first)
    # everything consumed before the stop was produced and committed: exactly the committed prefix
    assert set(first_sources) == {(t, off) for t, off in expected if off < committed1[t]}
    assert max(first_sources.values()) == 1

    log2 = tmp_path / "run2.log"
    proc = spawn_cli([*args[:-8], "--commit-interval-ms", "200"], log2)  # full speed now
    try:
        serving_address(proc, log2)
        wait_for(
            lambda: all(
                committed(kafka_server.bootstrap, group, t)[0] == n
                for t, n in Counter(r.topic for r in records).items()
            ),
            timeout_s=120,
            every_s=0.3,
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        stop_process(proc)
    out = _outputs(kafka_server.bootstrap, topics, len(expected))
    got = Counter((o.source[0], o.source[2]) for o in out)
    assert set(got) == expected
    assert max(got.values()) == 1  # the restart repeated nothing that had been acknowledged and committed
