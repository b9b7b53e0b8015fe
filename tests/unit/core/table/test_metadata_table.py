"""Apache Hudi's metadata table: every Inlet commit turns it off, a failed one leaves it as it was.

The tables here carry a stand-in metadata table (the table config naming its partitions, a
``.hoodie/metadata`` directory, Hadoop's ``.crc`` of ``hoodie.properties``); tests/oracle/
test_mixed_writers.py shows the same on tables Apache Hudi wrote, read by Apache Hudi.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from inlet.core import HudiTable
from inlet.core.actions.rollback import rollback
from inlet.core.errors import UnsupportedError
from inlet.core.storage import Storage
from inlet.core.table import metadata_table
from inlet.core.timeline.instant import Instant, State

ON = {
    metadata_table.PARTITIONS_KEY: "column_stats,files",
    metadata_table.INFLIGHT_PARTITIONS_KEY: "record_index",
}


def rows(ids: list[int], ts: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": pa.array(["sf"] * len(ids)),
            "ts": pa.array([ts] * len(ids), pa.int64()),
        }
    )


def with_metadata_table(tmp_path: Path, **kwargs: Any) -> HudiTable:
    """A table whose config names metadata table partitions, with the directory and the checksum
    file Apache Hudi leaves on local disk."""
    t = HudiTable.create(
        str(tmp_path / "t"), name="t", record_key="id", partition_by="city", ordering_field="ts", **kwargs
    )
    t.write(rows([1, 2], 1), operation="insert")
    turn_on(Path(t.base_path))
    return HudiTable.open(t.base_path)


def turn_on(base: Path) -> None:
    props = base / ".hoodie" / "hoodie.properties"
    lines = [ln for ln in props.read_text().splitlines() if not ln.startswith("hoodie.table.metadata.")]
    props.write_text("\n".join([*lines, *(f"{k}={v}" for k, v in ON.items())]) + "\n")
    (base / ".hoodie" / ".hoodie.properties.crc").write_bytes(b"crc of the text above")
    (base / ".hoodie" / "metadata" / ".hoodie" / "timeline").mkdir(parents=True)
    (base / ".hoodie" / "metadata" / "files").mkdir()


def state(base: Path) -> dict[str, Any]:
    hoodie = base / ".hoodie"
    return {
        "properties": (hoodie / "hoodie.properties").read_bytes(),
        "crc": (hoodie / ".hoodie.properties.crc").read_bytes()
        if (hoodie / ".hoodie.properties.crc").exists()
        else None,
        "metadata": sorted(str(p.relative_to(hoodie)) for p in (hoodie / "metadata").rglob("*")),
    }


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_commit_turns_the_metadata_table_off(tmp_path: Path, table_type: str) -> None:
    t = with_metadata_table(tmp_path, table_type=table_type)
    before = dict(t.props)
    assert metadata_table.is_on(before)
    t.write(rows([1, 3], 2), operation="upsert")
    after = HudiTable.open(t.base_path).props
    assert after[metadata_table.PARTITIONS_KEY] == after[metadata_table.INFLIGHT_PARTITIONS_KEY] == ""
    assert {k: v for k, v in after.items() if k not in metadata_table.KEYS} == {
        k: v for k, v in before.items() if k not in metadata_table.KEYS
    }
    base = Path(t.base_path)
    assert not (base / ".hoodie" / "metadata").exists()
    # Hadoop's checksum of the old text would fail Apache Hudi's read of the new one
    assert not (base / ".hoodie" / ".hoodie.properties.crc").exists()
    assert sorted(r["id"] for r in t.read().to_pylist()) == [1, 2, 3]
    # Apache Hudi's next writer builds it again: the commit after that turns it off again
    turn_on(base)
    HudiTable.open(t.base_path).delete(pa.table({"id": [2], "city": ["sf"]}))
    assert not metadata_table.is_on(HudiTable.open(t.base_path).props)
    assert not (base / ".hoodie" / "metadata").exists()


def test_a_failed_commit_leaves_the_metadata_table_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The completed instant cannot be written (a store failing at that moment): the table config,
    its checksum file and the metadata table are as before, the write is rolled back."""
    t = with_metadata_table(tmp_path)
    base = Path(t.base_path)
    before = state(base)
    real_write = Storage.write_atomic

    def failing(self: Storage, rel: str, data: bytes) -> None:
        if rel.endswith(".commit") and "_" in rel.rsplit("/", 1)[-1]:  # the completed instant
            assert not metadata_table.is_on(HudiTable.open(t.base_path).props)  # turned off by now
            raise OSError("the store failed")
        real_write(self, rel, data)

    monkeypatch.setattr(Storage, "write_atomic", failing)
    with pytest.raises(OSError, match="the store failed"):
        t.write(rows([1, 3], 2), operation="upsert")
    monkeypatch.undo()
    assert state(base) == before
    reopened = HudiTable.open(t.base_path)
    assert [i.action for i in reopened.instants() if i.state.name == "COMPLETED"] == ["commit", "rollback"]
    assert sorted(r["id"] for r in reopened.read().to_pylist()) == [1, 2]


def test_hoodie_metadata_enable_true_is_refused(tmp_path: Path) -> None:
    t = with_metadata_table(tmp_path)
    base = Path(t.base_path)
    before = state(base)
    with pytest.raises(UnsupportedError, match=r"hoodie\.metadata\.enable=true"):
        t.write(rows([3], 1), operation="insert", options={"hoodie.metadata.enable": "true"})
    assert state(base) == before
    assert len(HudiTable.open(t.base_path).instants()) == 1


def test_a_rollback_turns_it_off_only_if_the_metadata_table_recorded_the_instant(tmp_path: Path) -> None:
    """Apache Hudi writes a data instant's files into its metadata table before completing the
    instant: a pending instant the metadata table recorded cannot be rolled back behind its back;
    one it never saw (a failed Inlet write) leaves it on."""
    t = with_metadata_table(tmp_path)
    base = Path(t.base_path)
    timeline = base / ".hoodie" / "timeline"
    unseen, seen = "20200101000000001", "20200101000000002"
    for pending in (unseen, seen):
        (timeline / f"{pending}.commit.requested").write_bytes(b"")
    mdt_timeline = base / ".hoodie" / "metadata" / ".hoodie" / "timeline"
    (mdt_timeline / f"{seen}.deltacommit.requested").write_bytes(b"")
    before = state(base)
    rollback(t, Instant(unseen, "commit", State.REQUESTED))
    assert state(base) == before
    rollback(t, Instant(seen, "commit", State.REQUESTED))
    assert not metadata_table.is_on(HudiTable.open(t.base_path).props)
    assert not (base / ".hoodie" / "metadata").exists()
    assert [i.action for i in HudiTable.open(t.base_path).instants()] == ["commit", "rollback", "rollback"]
