"""A plain pandas model of Apache Hudi Copy-on-Write table semantics.

The model is the test oracle for Inlet's writer: it knows nothing about file groups, indexes
or Parquet; it only keeps the rows a snapshot read must return, and a copy of them after
every commit (for time travel). Everything here is written from Apache Hudi's documented
behaviour, independently of ``inlet.core``:

- a record is identified by (record key, partition path);
- record keys: a simple key generator stores the value as text; a complex one (several record
  key fields, or several partition fields) stores ``f1:v1,f2:v2`` with ``__null__`` /
  ``__empty__`` for null / empty values;
- partition paths: the partition values joined by ``/``, ``field=value`` when hive-style,
  ``__HIVE_DEFAULT_PARTITION__`` for null or empty values; timestamp-based partitioning turns
  epoch milliseconds into a UTC date pattern;
- ``upsert``: duplicates in the batch are combined first (EVENT_TIME_ORDERING: the largest
  ordering value wins, null sorts lowest, ties go to the later row; COMMIT_TIME_ORDERING: the
  later row wins); the winner then replaces every stored copy of its key it beats (EVENT_TIME:
  incoming ordering >= stored; COMMIT_TIME: always); keys not stored are inserted.
  ``_hoodie_is_deleted = true`` records delete what they beat and are never stored;
- ``delete``: removes every stored copy of the keys, whatever their ordering values;
- ``insert`` / ``bulk_insert``: the batch is combined (``hoodie.combine.before.insert``) and
  appended without looking at stored data, so an existing key becomes a duplicate row
  (Apache Hudi >= 0.15 defaults ``hoodie.merge.allow.duplicate.on.inserts`` to true);
- ``insert_overwrite``: the partitions present in the (combined) batch are replaced by its rows;
  ``insert_overwrite_table``: the whole table is; ``delete_partition``: partitions are emptied;
- schema evolution: new columns are appended (null for older rows); values are plain Python
  objects, so an int -> long promotion needs no conversion.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

COMMIT_TIME = "_hoodie_commit_time"
RECORD_KEY = "_hoodie_record_key"
PARTITION_PATH = "_hoodie_partition_path"
IS_DELETED = "_hoodie_is_deleted"
MODEL_META = (COMMIT_TIME, RECORD_KEY, PARTITION_PATH)
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

EVENT_TIME = "EVENT_TIME_ORDERING"
COMMIT_TIME_ORDERING = "COMMIT_TIME_ORDERING"


def _text(value: Any) -> str:
    """A value as Hudi's key generators print it (Java's ``toString`` of the Avro value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class ModelConfig:
    record_key: tuple[str, ...]
    partition_by: tuple[str, ...] = ()
    hive_style: bool = False
    merge_mode: str = COMMIT_TIME_ORDERING
    ordering_field: str | None = None
    # timestamp-based partitioning: the partition field holds epoch milliseconds, the path is
    # this strftime pattern of the UTC date (e.g. "%Y/%m/%d" for Hudi's "yyyy/MM/dd")
    timestamp_strftime: str | None = None

    @property
    def complex_keys(self) -> bool:
        return len(self.record_key) > 1 or len(self.partition_by) > 1


class CowModel:
    """The rows of a Hudi COW table, after every commit."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.columns: list[str] = []  # data columns, in table order
        self.struct_fields: dict[str, list[str]] = {}  # struct column -> its fields (they may grow)
        self.df = pd.DataFrame({c: pd.Series(dtype=object) for c in MODEL_META})
        # (instant, rows, columns, struct fields) after every commit
        self.history: list[tuple[str, pd.DataFrame, list[str], dict[str, list[str]]]] = []

    # ------------------------------------------------------------------ keys

    def record_key(self, row: Mapping[str, Any]) -> str:
        fields = self.config.record_key
        if not self.config.complex_keys:
            value = row[fields[0]]
            assert value is not None and _text(value) != "", "a simple record key cannot be null or empty"
            return _text(value)
        parts = []
        for f in fields:
            v = row.get(f)
            text = "__null__" if v is None else ("__empty__" if _text(v) == "" else _text(v))
            parts.append(f"{f}:{text}")
        return ",".join(parts)

    def partition_path(self, row: Mapping[str, Any]) -> str:
        segments = []
        for f in self.config.partition_by:
            v = row.get(f)
            if v is not None and self.config.timestamp_strftime is not None:
                text = dt.datetime.fromtimestamp(v / 1000, dt.UTC).strftime(self.config.timestamp_strftime)
            else:
                text = DEFAULT_PARTITION if v is None or _text(v) == "" else _text(v)
            segments.append(f"{f}={text}" if self.config.hive_style else text)
        return "/".join(segments)

    # ------------------------------------------------------------------ merging

    def _ordering(self, row: Mapping[str, Any]) -> tuple[bool, Any]:
        field = self.config.ordering_field
        value = row.get(field) if field else None
        return (value is not None, value)  # null sorts lowest

    def _incoming_wins(self, incoming: Mapping[str, Any], stored: Mapping[str, Any]) -> bool:
        if self.config.merge_mode == COMMIT_TIME_ORDERING:
            return True
        return self._ordering(incoming) >= self._ordering(stored)

    def _combine(self, rows: Sequence[Mapping[str, Any]], combine: bool = True) -> list[dict[str, Any]]:
        """One record per (key, partition): the winner in batch order (ties: the later row).

        ``combine=False`` (``hoodie.combine.before.insert=false``): every row, keyed.
        """
        if not combine:
            return [
                {**r, RECORD_KEY: self.record_key(r), PARTITION_PATH: self.partition_path(r)} for r in rows
            ]
        winners: dict[tuple[str, str], dict[str, Any]] = {}
        for row in rows:
            rec = {**row, RECORD_KEY: self.record_key(row), PARTITION_PATH: self.partition_path(row)}
            ident = (rec[RECORD_KEY], rec[PARTITION_PATH])
            prev = winners.get(ident)
            if prev is None or self._incoming_wins(rec, prev):
                winners.pop(ident, None)
                winners[ident] = rec
        return list(winners.values())

    def _evolve(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            for c, v in row.items():
                if c not in self.columns and c not in MODEL_META:
                    self.columns.append(c)
                if isinstance(v, dict):  # a struct: fields added later are null in older values
                    known = self.struct_fields.setdefault(c, [])
                    known.extend(k for k in v if k not in known)
        for c in self.columns:
            if c not in self.df.columns:
                self.df[c] = pd.Series([None] * len(self.df), index=self.df.index, dtype=object)

    def _stamp(self, rec: Mapping[str, Any], instant: str) -> dict[str, Any]:
        """A stored row written by ``instant``: meta columns + every data column."""
        return {
            COMMIT_TIME: instant,
            RECORD_KEY: rec[RECORD_KEY],
            PARTITION_PATH: rec[PARTITION_PATH],
            **{c: rec.get(c) for c in self.columns},
        }

    def _frame(self, records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
        cols = [*MODEL_META, *self.columns]
        return pd.DataFrame([[r.get(c) for c in cols] for r in records], columns=cols, dtype=object)

    @staticmethod
    def _deleted(rec: Mapping[str, Any]) -> bool:
        return bool(rec.get(IS_DELETED))

    # ------------------------------------------------------------------ operations

    def upsert(self, rows: Sequence[Mapping[str, Any]], instant: str) -> None:
        self._evolve(rows)
        batch = {(r[RECORD_KEY], r[PARTITION_PATH]): r for r in self._combine(rows)}
        out: list[dict[str, Any]] = []
        matched: set[tuple[str, str]] = set()
        for stored in self.df.to_dict("records"):
            ident = (stored[RECORD_KEY], stored[PARTITION_PATH])
            incoming = batch.get(ident)
            if incoming is None:
                out.append(stored)
                continue
            matched.add(ident)  # every stored copy of the key is merged with the incoming record
            if not self._incoming_wins(incoming, stored):
                out.append(stored)
            elif not self._deleted(incoming):
                out.append(self._stamp(incoming, instant))
        out.extend(
            self._stamp(r, instant)
            for ident, r in batch.items()
            if ident not in matched and not self._deleted(r)
        )
        self.df = self._frame(out)
        self._commit(instant)

    def insert(self, rows: Sequence[Mapping[str, Any]], instant: str, combine: bool = True) -> None:
        self._evolve(rows)
        new = [self._stamp(r, instant) for r in self._combine(rows, combine) if not self._deleted(r)]
        self.df = self._frame([*self.df.to_dict("records"), *new])
        self._commit(instant)

    def bulk_insert(self, rows: Sequence[Mapping[str, Any]], instant: str, combine: bool = True) -> None:
        self.insert(rows, instant, combine)

    def delete(self, rows: Sequence[Mapping[str, Any]], instant: str) -> None:
        idents = {(self.record_key(r), self.partition_path(r)) for r in rows}
        hit = pd.Series(
            [(k, p) in idents for k, p in zip(self.df[RECORD_KEY], self.df[PARTITION_PATH], strict=True)],
            index=self.df.index,
            dtype=bool,
        )
        self.df = self.df[~hit].reset_index(drop=True)
        self._commit(instant)

    def insert_overwrite(self, rows: Sequence[Mapping[str, Any]], instant: str, combine: bool = True) -> None:
        self._evolve(rows)
        combined = self._combine(rows, combine)
        partitions = {r[PARTITION_PATH] for r in combined}  # deleted records name partitions too
        rest = self.df[~self.df[PARTITION_PATH].isin(partitions)].to_dict("records")
        new = [self._stamp(r, instant) for r in combined if not self._deleted(r)]
        self.df = self._frame([*rest, *new])
        self._commit(instant)

    def insert_overwrite_table(
        self, rows: Sequence[Mapping[str, Any]], instant: str, combine: bool = True
    ) -> None:
        self._evolve(rows)
        combined = self._combine(rows, combine)
        self.df = self._frame([self._stamp(r, instant) for r in combined if not self._deleted(r)])
        self._commit(instant)

    def delete_partition(self, partitions: Iterable[str], instant: str) -> None:
        self.df = self.df[~self.df[PARTITION_PATH].isin(set(partitions))].reset_index(drop=True)
        self._commit(instant)

    def apply(
        self,
        operation: str,
        rows: Sequence[Mapping[str, Any]],
        instant: str,
        partitions: Iterable[str] | None = None,
        combine_before_insert: bool = True,
    ) -> None:
        op = operation.lower()
        if op == "delete_partition":
            paths = set(partitions or []) | {self.partition_path(r) for r in rows}
            self.delete_partition(paths, instant)
        elif op in ("insert", "bulk_insert", "insert_overwrite", "insert_overwrite_table"):
            getattr(self, op)(rows, instant, combine_before_insert)
        else:
            getattr(self, op)(rows, instant)

    def _commit(self, instant: str) -> None:
        assert not self.history or instant > self.history[-1][0], "instants must increase"
        structs = {c: list(f) for c, f in self.struct_fields.items()}
        self.history.append((instant, self.df.copy(), list(self.columns), structs))

    # ------------------------------------------------------------------ reading

    @property
    def instants(self) -> list[str]:
        return [h[0] for h in self.history]

    def columns_at(self, as_of: str | None = None) -> list[str]:
        return list(self._at(as_of)[1])

    def struct_fields_at(self, as_of: str | None = None) -> dict[str, list[str]]:
        return dict(self._at(as_of)[2])

    def rows(self, as_of: str | None = None) -> list[dict[str, Any]]:
        """Rows visible at ``as_of`` (the latest commit if None): meta columns + data columns."""
        df, cols, structs = self._at(as_of)
        records = df[[*MODEL_META, *cols]].to_dict("records")
        out = []
        for r in records:
            row = {k: _unbox(v) for k, v in r.items()}
            for c, fields in structs.items():
                if isinstance(row.get(c), dict):
                    row[c] = {f: row[c].get(f) for f in fields}
            out.append(row)
        return out

    def _at(self, as_of: str | None) -> tuple[pd.DataFrame, list[str], dict[str, list[str]]]:
        visible = [h for h in self.history if as_of is None or h[0] <= as_of]
        if not visible:
            return pd.DataFrame(columns=list(MODEL_META), dtype=object), [], {}
        _, df, cols, structs = visible[-1]
        return df, cols, structs


def _unbox(value: Any) -> Any:
    """pandas may hand back NaN/NaT for missing object values; the model means None."""
    if value is None:
        return None
    if isinstance(value, float) and value != value:
        return None
    if value is pd.NaT:
        return None
    return value


# ---------------------------------------------------------------------- bucket index


def java_string_hash(text: str) -> int:
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h


def hudi_bucket(record_key_values: Sequence[str], num_buckets: int) -> int:
    """Apache Hudi's simple bucket index: ``(List#hashCode(values) & Integer.MAX_VALUE) % n``."""
    h = 1
    for v in record_key_values:
        h = (31 * h + java_string_hash(v)) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % num_buckets
