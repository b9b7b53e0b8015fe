"""The shared progress helper of long jobs: throttled lines with done/total, rows, rate and ETA; silence for
short jobs."""

from __future__ import annotations

import logging

import pytest

from inlet.core.progress import FIELDS_ATTR, LOGGER, Progress, Throttle, human


def test_a_long_job_logs_at_most_once_per_interval_and_a_closing_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    p = Progress("compaction 1", "file groups", total=12, interval_s=5.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger=LOGGER)
    for _ in range(2):  # 2 groups in 4 s: nothing yet
        now[0] += 2.0
        p.advance(rows=300_000)
    assert not caplog.records
    now[0] += 2.0
    p.advance(rows=600_000)  # 6 s in, 3 of 12 done: one line, 18 s left
    now[0] += 1.0
    p.advance(rows=1)  # 1 s after that line: none
    [line] = caplog.records
    assert line.getMessage() == "compaction 1: 3/12 file groups, 1.2M rows, 200.0k rows/s, ETA 18 s"
    fields = getattr(line, FIELDS_ATTR)
    assert (fields["job"], fields["done"], fields["total"], fields["rows"], fields["eta_s"]) == (
        "compaction 1",
        3,
        12,
        1_200_000,
        18.0,
    )
    now[0] += 23.0
    p.advance(8)
    p.finish()
    assert [r.getMessage() for r in caplog.records[1:]] == [
        "compaction 1: 12/12 file groups, 1.2M rows, 40.0k rows/s",
        "compaction 1: 12/12 file groups, 1.2M rows, 40.0k rows/s (done in 30 s)",
    ]


def test_a_short_job_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    p = Progress("clean 1", "files deleted", total=3, interval_s=5.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger=LOGGER)
    for _ in range(3):
        now[0] += 1.0
        p.advance()
    p.finish()
    assert not caplog.records


def test_human_numbers() -> None:
    assert [human(n) for n in (950, 1234, 1_234_567, 2e9)] == ["950", "1.2k", "1.2M", "2.0G"]


def test_throttle_keys_first_lines_and_force() -> None:
    now = [0.0]
    throttle = Throttle(2.0, clock=lambda: now[0])
    throttle.hold("held")
    assert [throttle.due("a"), throttle.due("a"), throttle.due("b"), throttle.due("held")] == [
        True,
        False,
        True,
        False,
    ]
    assert throttle.due("a", force=True)
    now[0] += 2.0
    assert [throttle.due("a"), throttle.due("a"), throttle.due("held")] == [True, False, True]
