"""One definition of what a read asks for: query types and their instants are checked the same way
by the Python API, the CLI and the Spark data source."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from inlet.core import HudiTable
from inlet.core.errors import InvalidInputError
from inlet.core.read.options import ChangeFormat, InstantRange, QueryType, ReadOptions


def test_query_types_parse_as_hudi_spells_them() -> None:
    assert QueryType.parse("SNAPSHOT") is QueryType.SNAPSHOT
    assert QueryType.parse("read-optimized") is QueryType.READ_OPTIMIZED
    assert QueryType.parse(" incremental ") is QueryType.INCREMENTAL
    with pytest.raises(InvalidInputError, match=r"unknown query type 'latest'.*snapshot, read_optimized"):
        QueryType.parse("latest")


def test_instants_must_fit_the_query_type() -> None:
    assert ReadOptions.of("incremental", begin="1", end="2").range == InstantRange("1", "2")
    with pytest.raises(InvalidInputError, match="needs a begin instant"):
        ReadOptions.of("incremental")
    with pytest.raises(InvalidInputError, match="not as of an instant"):
        ReadOptions.of("incremental", begin="1", as_of="2")
    with pytest.raises(InvalidInputError, match="apply to incremental queries, not snapshot"):
        ReadOptions.of("snapshot", begin="1")


def test_change_formats_fit_incremental_queries_only() -> None:
    assert (
        ReadOptions.of("incremental", begin="1", change_format="min-delta").change_format
        is ChangeFormat.MIN_DELTA
    )
    with pytest.raises(InvalidInputError, match="append_only change format applies to incremental queries"):
        ReadOptions.of("snapshot", change_format="append_only")
    with pytest.raises(InvalidInputError, match="min_delta change queries take no filters"):
        ReadOptions.of("incremental", begin="1", change_format="min_delta", filters=[("id", "=", 1)])
    assert ChangeFormat.parse("CDC") is ChangeFormat.CDC  # Hudi's spelling of the format
    with pytest.raises(InvalidInputError, match="unknown change format 'full'"):
        ChangeFormat.parse("full")


def test_a_snapshot_read_refuses_the_incremental_type_and_points_to_read_changes(tmp_path: Path) -> None:
    t = HudiTable.create(str(tmp_path / "t"), "t", record_key="id")
    t.write(pa.table({"id": [1], "v": [1]}), "insert")
    assert t.read(query_type=QueryType.READ_OPTIMIZED, columns=["id"]).to_pylist() == [{"id": 1}]
    with pytest.raises(InvalidInputError, match="read_changes"):
        t.read(query_type="incremental")
