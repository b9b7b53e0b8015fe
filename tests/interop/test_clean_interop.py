"""Inlet cleans tables Apache Hudi wrote: after ``HudiTable.clean`` (one commit retained, the
harshest setting) every Apache-Hudi-written table still reads exactly as before by hudi-rs (each
file-group reader that could read it before) and by Inlet, and the clean instant Inlet wrote sits
on the timeline in Hudi's file names."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from support.hudi_testdata import COW_TABLES, MOR_TABLES, available, extract

from inlet.core import HudiTable
from inlet.core.errors import UnsupportedError
from inlet.core.timeline.instant import Action

pytestmark = pytest.mark.skipif(not available(), reason="../shared/testdata/hudi-tables is not present")


def hudi_rs(path: Path, version: str) -> list[tuple[str, ...]] | None:
    from hudi import HudiReadOptions, HudiTableBuilder

    try:
        table = (
            HudiTableBuilder.from_base_uri(str(path))
            .with_hudi_option("hoodie.read.file.group.reader.version", version)
            .build()
        )
        batches = table.read(HudiReadOptions())
    except Exception:  # this reader cannot read this table at all (checked before and after)
        return None
    if not batches:
        return []
    t = pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")
    return sorted(
        tuple(str(v) for v in r.values())
        for r in t.drop_columns([c for c in ("_hoodie_file_name",) if c in t.column_names]).to_pylist()
    )


def inlet_rows(path: Path) -> list[tuple[str, ...]]:
    t = HudiTable.open(str(path)).read()
    return sorted(
        tuple(str(v) for v in r.values())
        for r in t.drop_columns([c for c in ("_hoodie_file_name",) if c in t.column_names]).to_pylist()
    )


@pytest.mark.parametrize("name", [*COW_TABLES, *MOR_TABLES])
def test_inlet_cleans_an_apache_hudi_table(tmp_path: Path, name: str) -> None:
    path = extract(name, tmp_path)
    if HudiTable.open(str(path)).version != 8:
        with pytest.raises(UnsupportedError, match="table version 8"):
            HudiTable.open(str(path)).clean()
        return
    table = HudiTable.open(str(path))
    current = table.read(meta_columns=False)
    if current.num_rows and table.populate_meta_fields:
        # two more commits rewriting every row (the same values): the older slices become cleanable
        for _ in range(2):
            HudiTable.open(str(path)).write(current, "upsert")
    before = {v: hudi_rs(path, v) for v in ("1", "2")}
    inlet_before = inlet_rows(path)
    result = HudiTable.open(str(path)).clean({"hoodie.clean.commits.retained": "1"})
    after = {v: hudi_rs(path, v) for v in ("1", "2")}
    assert after == before
    assert inlet_rows(path) == inlet_before
    if current.num_rows and table.populate_meta_fields:
        assert result.instant is not None and result.files_deleted > 0
    if result.instant is not None:
        cleans = HudiTable.open(str(path)).timeline.completed([Action.CLEAN])
        assert result.instant in [c.time for c in cleans]
        names = {p.name for p in (path / ".hoodie" / "timeline").iterdir()}
        assert f"{result.instant}.clean.requested" in names
