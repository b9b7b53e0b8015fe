"""How two versions of a record merge (Apache Hudi 1.x ``BufferedRecordMergerFactory``), stated one record at a time by :class:`RecordMerger`; :mod:`inlet.core.merge.log_events` applies the same rules to whole columns.

- ``COMMIT_TIME_ORDERING``: the later write wins, deletes included.
- ``EVENT_TIME_ORDERING``: the record with the larger ordering value wins; on a tie the later
  write (the log over the base, a later block over an earlier one) wins. A null ordering value
  loses to any value.
- Deletes: a delete whose ordering value is Hudi's default (absent, or integer 0 — what the
  ``delete`` operation and SQL ``DELETE`` write) wins over any earlier version, the base file's
  included, and the next write of that key wins over it. (Apache Hudi 1.x compares such a
  re-insert with the base record again, which can resurrect the deleted base record; hudi-rs
  drops the re-insert. Inlet keeps the write order: delete, then the re-insert.) A delete with a
  real ordering value removes the key unless the record it meets has a strictly larger ordering
  value of the same kind (values of different kinds: the delete wins). Records with
  ``_hoodie_is_deleted = true`` are deletes carrying their ordering value.
- Partial updates (Debezium's unchanged TOAST columns): a winning record's string or bytes column
  that holds the placeholder ``__debezium_unavailable_value`` takes the value of the record it
  replaces (Hudi's ``FILL_UNAVAILABLE`` partial-update mode). With nothing to replace (an insert)
  the placeholder stays.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from inlet.core.config import MergeMode
from inlet.core.errors import SchemaError
from inlet.core.keys import KeyGenerator
from inlet.core.log.reader import (
    is_default_ordering_value,
    same_ordering_kind,
)
from inlet.core.schema import IS_DELETED_COLUMN, MetaField

RECORD_KEY: str = MetaField.RECORD_KEY.value
DEBEZIUM_UNAVAILABLE_VALUE = "__debezium_unavailable_value"

Mask = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class MergeConfig:
    """How a table merges records (from its properties)."""

    mode: MergeMode
    ordering_field: str | None = None
    unavailable_value: str | None = DEBEZIUM_UNAVAILABLE_VALUE
    key_generator: KeyGenerator | None = None  # recomputes keys when _hoodie_record_key is absent

    @property
    def event_time(self) -> bool:
        return self.mode is MergeMode.EVENT_TIME_ORDERING and self.ordering_field is not None


class KeyVersion:
    """The current version of one key: a record (``row``) or a delete (``row`` is None).

    ``shadows_base``: an always-winning delete came earlier in the logs, so the base file's
    record of this key is gone whatever the ordering values say.
    """

    __slots__ = ("ordering", "row", "shadows_base")

    def __init__(self, row: dict[str, Any] | None, ordering: Any, shadows_base: bool = False) -> None:
        self.row = row
        self.ordering = ordering
        self.shadows_base = shadows_base

    @property
    def is_delete(self) -> bool:
        return self.row is None

    @property
    def commit_time_delete(self) -> bool:
        """A delete with the default ordering value: it wins regardless of ordering values."""
        return self.row is None and is_default_ordering_value(self.ordering)


def _compare(a: Any, b: Any) -> int:
    """Order of two ordering values: -1, 0, 1 (null first; values of different kinds compare equal,
    so the later write wins)."""
    if a is None or b is None:
        return (a is not None) - (b is not None)
    if not same_ordering_kind(a, b):
        return 0
    try:
        return int(a > b) - int(a < b)
    except TypeError:  # e.g. naive vs aware datetimes
        return 0


def _is_marker(value: Any, marker: str, marker_bytes: bytes) -> bool:
    return (isinstance(value, str) and value == marker) or (
        isinstance(value, bytes) and value == marker_bytes
    )


class RecordMerger:
    """Per-key merge state of one file slice (the memory bound: one entry per key)."""

    def __init__(self, config: MergeConfig) -> None:
        self.config = config
        self.entries: dict[str, KeyVersion] = {}
        self._marker = config.unavailable_value
        self._marker_bytes = config.unavailable_value.encode() if config.unavailable_value else b""

    # ------------------------------------------------------------------ rules

    def _ordering(self, row: dict[str, Any]) -> Any:
        field = self.config.ordering_field
        return row.get(field) if field is not None else None

    def _newer_wins(self, older: KeyVersion, newer: KeyVersion) -> bool:
        """Hudi's ``shouldKeepNewerRecord`` (records and data-borne deletes)."""
        if not self.config.event_time:
            return True
        if older.commit_time_delete or newer.commit_time_delete:
            return True
        return _compare(newer.ordering, older.ordering) >= 0

    def _fill(self, winner: KeyVersion, loser: KeyVersion) -> KeyVersion:
        """Partial update: the winner's placeholder columns take the loser's values."""
        marker = self._marker
        if marker is None or winner.row is None or loser.row is None:
            return winner
        row = winner.row
        stale = [c for c, v in row.items() if _is_marker(v, marker, self._marker_bytes)]
        if not stale:
            return winner
        filled = dict(row)
        for c in stale:
            filled[c] = loser.row.get(c)
        return KeyVersion(filled, winner.ordering, winner.shadows_base)

    def _pick(self, older: KeyVersion, newer: KeyVersion) -> KeyVersion:
        winner = self._fill(newer, older) if self._newer_wins(older, newer) else self._fill(older, newer)
        if (older.shadows_base or older.commit_time_delete) and not winner.shadows_base:
            winner = KeyVersion(winner.row, winner.ordering, True)
        return winner

    # ------------------------------------------------------------------ log records

    def add_record(self, key: str, row: dict[str, Any], deleted: bool | None = None) -> None:
        """A log data record; ``_hoodie_is_deleted = true`` (or ``deleted``) makes it a delete
        carrying its ordering value."""
        ordering = self._ordering(row)
        if deleted is None:
            deleted = row.get(IS_DELETED_COLUMN) is True
        newer = KeyVersion(None if deleted else row, ordering)
        older = self.entries.get(key)
        self.entries[key] = newer if older is None else self._pick(older, newer)

    def add_delete(self, key: str, ordering: Any) -> None:
        """An entry of a delete block (Hudi's ``deltaMergeDeleteRecord``)."""
        older = self.entries.get(key)
        delete = KeyVersion(None, ordering)
        if older is None or not self.config.event_time:
            self.entries[key] = delete
            return
        if older.commit_time_delete:
            return  # already deleted regardless of ordering
        delete.shadows_base = older.shadows_base
        keep_older = (
            not is_default_ordering_value(ordering)
            and same_ordering_kind(older.ordering, ordering)
            and _compare(older.ordering, ordering) > 0
        )
        if not keep_older:
            self.entries[key] = delete

    # ------------------------------------------------------------------ base records

    def merge_base(self, key: str, row: dict[str, Any]) -> dict[str, Any] | None:
        """The result for a base record whose key the logs touched (None: deleted). The key's
        log entry is consumed, as Hudi's reader does (a duplicate base key gets no log merge)."""
        log_entry = self.entries.pop(key)
        if log_entry.shadows_base or log_entry.commit_time_delete:
            return log_entry.row
        base = KeyVersion(row, self._ordering(row))
        return self._pick(base, log_entry).row

    def remaining_rows(self) -> Iterator[dict[str, Any]]:
        """Records the logs hold for keys no base record had (inserts), in first-write order."""
        for entry in self.entries.values():
            if entry.row is not None:
                yield entry.row


def row_key(row: dict[str, Any], config: MergeConfig) -> str:
    key = row.get(RECORD_KEY)
    if key is not None:
        return str(key)
    kg = config.key_generator
    if kg is None:
        raise SchemaError("a log record has no _hoodie_record_key and the table's key fields are unknown")
    one = pa.Table.from_pylist([{f: row.get(f) for f in kg.record_key_fields}])
    return str(kg.record_keys(one)[0].as_py())


def table_keys(table: pa.Table, config: MergeConfig) -> pa.Array:
    if RECORD_KEY in table.column_names and table.column(RECORD_KEY).null_count == 0:
        return table.column(RECORD_KEY).combine_chunks().cast(pa.string())
    if config.key_generator is None:
        raise SchemaError("base records have no _hoodie_record_key and the table's key fields are unknown")
    return config.key_generator.record_keys(table).combine_chunks()


def rows_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowException, TypeError, ValueError) as e:
        raise SchemaError(f"log records do not fit the table schema: {e}") from e


@dataclass
class SliceStats:
    """Counts of one merged file slice (compaction reports them in its write stats)."""

    log_blocks: int = 0  # counted data and delete blocks
    log_records: int = 0  # records in them: data records and delete entries
    log_keys: int = 0  # distinct keys those records wrote (Hudi's "merged records in log")
    base_records: int = 0  # records read from the base file
    updated: int = 0  # base records whose key the logs wrote, kept (in the base or the log version)
    deleted: int = 0  # base records removed by a log delete
    inserted: int = 0  # records only the logs hold
