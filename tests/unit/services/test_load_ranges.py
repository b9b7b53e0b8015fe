"""The initial load's CTID ranges (which pages are left after a crash) and its progress line."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from inlet.services.cli.main import main
from inlet.services.logs import TextFormatter
from inlet.services.writer.load_ranges import PageRange, Progress, _CopyStream, covers_all, ranges_left


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


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--load-workers", "--load-workers must be at least 1"),
        ("--pages-per-range", "--pages-per-range must"),
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
