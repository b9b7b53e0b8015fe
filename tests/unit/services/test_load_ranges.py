"""The initial load's CTID ranges (which pages are left after a crash) and its progress line."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from inlet.services.cli.main import main
from inlet.services.logs import TextFormatter
from inlet.services.stack.supervisor import LOAD_PROGRESS_FILE, StackConfig
from inlet.services.writer.load_ranges import (
    PageRange,
    Progress,
    ProgressFile,
    _CopyStream,
    covers_all,
    joined,
    ranges_left,
)
from inlet.services.writer.metrics import WriterMetrics


def test_a_table_splits_into_ranges_of_n_pages_the_last_one_open() -> None:
    assert ranges_left(10, 4, []) == [PageRange(0, 4), PageRange(4, 8), PageRange(8, None)]
    assert ranges_left(8, 4, []) == [PageRange(0, 4), PageRange(4, None)]
    assert ranges_left(0, 4, []) == [PageRange(0, None)]  # an empty table: one (empty) range


def test_the_ranges_left_are_the_gaps_between_the_done_ones() -> None:
    done = [PageRange(4, 8), PageRange(0, 4), PageRange(12, 16)]
    assert ranges_left(20, 4, done) == [PageRange(8, 12), PageRange(16, None)]
    # the open last range done: nothing past it is left, however the table grew
    assert ranges_left(30, 4, [PageRange(0, 4), PageRange(8, None)]) == [PageRange(4, 8)]
    assert covers_all([PageRange(0, 4), PageRange(4, None)])
    assert not covers_all([PageRange(0, 4), PageRange(5, None)])
    assert not covers_all([PageRange(0, 40)])


def test_a_range_selects_its_pages_by_ctid_and_round_trips_as_text() -> None:
    assert PageRange(0, 4).where() == "ctid < '(4,0)'::tid"
    assert PageRange(4, 8).where() == "ctid >= '(4,0)'::tid AND ctid < '(8,0)'::tid"
    assert PageRange(8, None).where() == "ctid >= '(8,0)'::tid"
    assert PageRange(0, None).where() == ""
    for r in (PageRange(4, 8), PageRange(8, None)):
        assert PageRange.parse(r.text()) == r
    with pytest.raises(ValueError, match="at least 1"):
        ranges_left(10, 0, [])


def test_progress_logs_rows_rate_and_eta_at_most_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    progress = Progress("app.public.t", pages=100, interval_s=5.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="inlet.writer.initial_load")
    for _ in range(4):  # 4 batches within 4 seconds: nothing yet
        now[0] += 1.0
        progress.add_rows(1000)
    assert not caplog.records
    progress.add_pages(25)
    now[0] += 1.0
    progress.add_rows(1000)  # 5 s in: one line
    now[0] += 1.0
    progress.add_rows(1000)
    [record] = caplog.records  # a quarter of the pages in 5 s: 15 s left
    assert record.getMessage() == "initial load app.public.t: 25/100 pages, 5.0k rows, 1.0k rows/s, ETA 15 s"
    fields = TextFormatter().format(record)
    assert "rows=5000" in fields and "rows_per_s=1000" in fields and 'table="app.public.t"' in fields, fields
    assert "eta_s=15.0" in fields, fields
    progress.report("table read")
    assert (
        caplog.records[-1]
        .getMessage()
        .endswith("25/100 pages, 6.0k rows, 1.0k rows/s, ETA 18 s (table read)")
    )


def test_progress_reaches_stack_status_and_the_writer_metrics_through_the_progress_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The load runs in the stack's supervisor; `inlet stack status` (text and JSON) and the
    writer's metrics read each table's rows, rows/s and ETA from the file it keeps in the stack dir."""
    stack = tmp_path / "stack"
    StackConfig(dir=str(stack)).save()
    path = stack / LOAD_PROGRESS_FILE
    now = [100.0]
    sink = ProgressFile(path)
    progress = Progress("app.public.t", pages=100, interval_s=5.0, clock=lambda: now[0], sink=sink)
    sink.update("app.public.nokey", "skipped", reason="public.nokey has no primary key")
    progress.add_pages(25)
    now[0] += 5.0
    progress.add_rows(5000)  # the periodic report: 5000 rows in 5 s, a quarter of the pages
    metrics = WriterMetrics(path)

    assert main(["stack", "status", "--dir", str(stack)]) == 0
    out = capsys.readouterr().out
    assert "initial load app.public.t: loading, 5000 rows, 1000 rows/s, 25/100 pages, ETA 15 s" in out, out
    assert (
        "initial load app.public.nokey: left to Debezium's snapshot (public.nokey has no primary key)" in out
    )
    assert main(["stack", "status", "--dir", str(stack), "--json"]) == 0
    t = json.loads(capsys.readouterr().out)["initial_load"]["app.public.t"]
    assert (t["state"], t["rows"], t["rows_per_s"], t["eta_s"]) == ("loading", 5000, 1000, 15.0)
    text = generate_latest(metrics.registry).decode()
    assert 'inlet_writer_initial_load_rows_total{table="app.public.t"} 5000.0' in text, text
    assert 'inlet_writer_initial_load_eta_seconds{table="app.public.t"} 15.0' in text
    assert 'inlet_writer_initial_load_pages_done{table="app.public.t"} 25.0' in text
    assert 'inlet_writer_initial_load_loaded{table="app.public.t"} 0.0' in text
    assert "nokey" not in text  # a table left to Debezium has no load to measure

    progress.add_pages(75)
    now[0] += 5.0
    progress.add_rows(5000)
    progress.report("table read", state="loaded")
    text = generate_latest(metrics.registry).decode()
    assert 'inlet_writer_initial_load_rows_total{table="app.public.t"} 10000.0' in text
    assert 'inlet_writer_initial_load_loaded{table="app.public.t"} 1.0' in text
    assert 'inlet_writer_initial_load_eta_seconds{table="app.public.t"} 0.0' in text
    assert main(["stack", "status", "--dir", str(stack)]) == 0
    assert (
        "initial load app.public.t: loaded, 10000 rows, 1000 rows/s, 100/100 pages\n"
        in capsys.readouterr().out
    )


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--load-workers", "--load-workers must be at least 1"),
        ("--pages-per-range", "--pages-per-range must"),
        ("--engine", "--engine must be local or spark, not '0'"),
    ],
)
def test_writer_load_refuses_a_zero_split_setting_in_one_line(
    flag: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["writer", "load", "--database-url", "postgresql://127.0.0.1:1/app", "--lake-root", "/nonexistent"]
    argv += ["--topic-prefix", "app", "--slot", "s", "--publication", "p", "--coordinator", "127.0.0.1:1"]
    assert main([*argv, flag, "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_a_copy_stream_ended_waits_for_the_read_in_flight_and_reads_nothing_after() -> None:
    """Arrow reads the COPY ahead on its own thread: ending the stream (the caller's thread closing
    the COPY) must wait for that read, and no read may reach the COPY afterwards (libpq segfaulted)."""
    inside, release = threading.Event(), threading.Event()
    pulled: list[int] = []

    def chunks() -> Iterator[bytes]:
        for i in range(3):
            pulled.append(i)
            if i == 1:
                inside.set()
                release.wait(10)
            yield b"x" * 4

    stream = _CopyStream(chunks())
    assert stream.readinto(bytearray(4)) == 4
    reader = threading.Thread(target=lambda: stream.readinto(bytearray(4)))
    reader.start()
    assert inside.wait(10)  # the read-ahead thread is inside the COPY
    ended = threading.Event()
    ender = threading.Thread(target=lambda: (stream.end(), ended.set()))
    ender.start()
    assert not ended.wait(0.3)  # end() waits for the read in flight...
    release.set()
    reader.join(10)
    assert ended.wait(10)  # ...and returns once it is done
    assert stream.readinto(bytearray(4)) == 0 and pulled == [0, 1]  # nothing reaches the COPY after


def test_copy_rows_are_joined_into_blocks_whole_and_in_order() -> None:
    rows = [f"{i},{'x' * (i % 7)}\n".encode() for i in range(1000)]
    blocks = list(joined(iter(rows), 64))
    assert b"".join(blocks) == b"".join(rows)
    assert all(len(b) >= 64 for b in blocks[:-1]) and len(blocks) > 10
    # a block ends where a row ends (the CSV reader may get any block boundary, a row is never cut)
    assert all(b.endswith(b"\n") for b in blocks)
    assert list(joined(iter([]), 64)) == []


def test_bytea_hex_and_array_json_are_decoded_whole_columns_as_value_by_value() -> None:
    """The column-at-once decoders (Arrow) agree with the value-by-value ones, on slices and nulls."""
    import json as jsonlib

    import pyarrow as pa

    from inlet.services.writer.initial_load import _hex_bytes, _json_lists

    raw = [b"\x00\xff", None, b"", b"abc", None, bytes(range(256))]
    hexes = pa.array([None if v is None else v.hex() for v in raw], pa.string())
    assert _hex_bytes(hexes).to_pylist() == raw
    assert _hex_bytes(hexes.slice(1, 4)).to_pylist() == raw[1:5]
    assert _hex_bytes(pa.array([None, None], pa.string())).to_pylist() == [None, None]
    with pytest.raises(ValueError):  # not hex: still refused
        _hex_bytes(pa.array(["zz"]))
    lists = [[1, None, 3], None, [], [2**31 - 1], None]
    as_json = pa.array([None if v is None else jsonlib.dumps(v) for v in lists])
    ints = _json_lists(pa.list_(pa.int32()))
    assert ints(as_json).to_pylist() == lists
    assert ints(as_json.slice(2, 3)).to_pylist() == lists[2:5]
    texts = [['a"b', "\\", None, "NULL", "", "é\u0001 ,\n"], None]
    as_json = pa.array([None if v is None else jsonlib.dumps(v, ensure_ascii=False) for v in texts])
    assert _json_lists(pa.list_(pa.string()))(as_json).to_pylist() == texts
