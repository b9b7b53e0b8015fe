"""Long table-service jobs show progress at the CLI's default log level; short ones stay quiet."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pyarrow as pa
import pytest

from inlet.core import HudiTable, progress
from inlet.services import logs

DUE = {"hoodie.compact.inline.max.delta.commits": "1", "hoodie.parquet.small.file.limit": "0"}


def _table(tmp_path: Path) -> HudiTable:
    t = HudiTable.create(
        str(tmp_path / "t"),
        name="t",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
    )
    rows = {
        "id": pa.array([1, 2, 3], pa.int64()),
        "city": ["sf", "la", "ny"],
        "ts": pa.array([1] * 3, pa.int64()),
    }
    t.write(pa.table(rows), "insert", DUE)
    t.write(pa.table(rows), "upsert", DUE)
    return t


@pytest.fixture
def stderr() -> io.StringIO:
    stream = io.StringIO()
    logs.configure(level=None, fmt="text", stream=stream)  # the CLI's default: WARNING
    yield stream
    logs.configure(level="WARNING")


def test_a_long_compaction_clean_and_clustering_log_progress_at_the_default_level(
    tmp_path: Path, stderr: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _table(tmp_path)
    monkeypatch.setattr(progress, "DEFAULT_INTERVAL_S", 0.0)  # every step is "long enough"
    instant = t.schedule_compaction(DUE)
    assert t.run_compaction(instant, DUE) is not None
    t.write(
        pa.table({"id": pa.array([1], pa.int64()), "city": ["sf"], "ts": pa.array([2], pa.int64())}), "upsert"
    )
    t.clean(
        {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": "1"}
    )
    assert t.cluster({"hoodie.clustering.plan.strategy.sort.columns": "id"}, force=True) is not None
    lines = [line for line in stderr.getvalue().splitlines() if "inlet.progress" in line]
    text = "\n".join(lines)
    assert f"compaction {instant}: 1/3 file groups, 1 rows" in text, text
    assert f"compaction {instant}: 3/3 file groups, 3 rows" in text and "(done in" in text, text
    assert "done=3" in text and "total=3" in text, text  # the numbers as fields too
    assert "clean " in text and "files deleted" in text, text
    assert "clustering " in text and " groups" in text, text
    assert f'table="{t.base_path}"' in text, text  # which table, for table-services run's many


def test_a_long_archive_logs_progress(
    tmp_path: Path, stderr: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = HudiTable.create(str(tmp_path / "a"), name="a", record_key="id", ordering_field="ts")
    for i in range(6):
        t.write(pa.table({"id": pa.array([i], pa.int64()), "ts": pa.array([1], pa.int64())}), "upsert")
    monkeypatch.setattr(progress, "DEFAULT_INTERVAL_S", 0.0)
    keep = {
        "hoodie.keep.min.commits": "2",
        "hoodie.keep.max.commits": "3",
        "hoodie.clean.commits.retained": "1",
    }
    archived = t.archive(keep).archived
    assert len(archived) == 4
    text = stderr.getvalue()
    assert f"archive {archived[0]}..{archived[-1]}: 4/4 instants read (done in" in text, text


def test_a_short_compaction_is_quiet(tmp_path: Path, stderr: io.StringIO) -> None:
    t = _table(tmp_path)
    assert t.compact(DUE) is not None
    assert "inlet.progress" not in stderr.getvalue()


def test_verify_progress_is_throttled_per_table(caplog: pytest.LogCaptureFixture) -> None:
    from inlet.services.verify.verifier import Progress

    now = [100.0]
    p = Progress(interval_s=2.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="inlet.verify.progress")
    p("a", "verifying", force=True)
    p("a", "reading the lake", rows=1)  # within 2 s of the forced line: dropped
    p("b", "verifying")
    now[0] += 2.0
    p("a", "reading the lake", rows=2)
    p("a", "verified", force=True)
    assert [(r.getMessage(), r.inlet_fields["table"]) for r in caplog.records] == [
        ("verifying", "a"),
        ("verifying", "b"),
        ("reading the lake", "a"),
        ("verified", "a"),
    ]
