"""Building ChangeRecords, producing them, and the model the tables are checked against."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from confluent_kafka import Producer

from inlet.core import HudiTable
from inlet.proto.changes.v1 import changes_pb2 as pb


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = _Unchanged()
T = pb


def col(name: str, typ: int, key: int = 0, precision: int = 0, scale: int = 0) -> pb.Column:
    return pb.Column(
        name=name, type=typ, nullable=key == 0, key_position=key, precision=precision, scale=scale
    )


CUSTOMERS = [
    col("id", pb.COLUMN_TYPE_INT32, key=1),
    col("name", pb.COLUMN_TYPE_STRING),
    col("note", pb.COLUMN_TYPE_STRING),
    col("amount", pb.COLUMN_TYPE_INT32),
]


def value(v: Any, c: pb.Column) -> pb.Value:
    if v is None:
        return pb.Value()
    if v is UNCHANGED:
        return pb.Value(unchanged=pb.Unchanged())
    if c.type == pb.COLUMN_TYPE_DECIMAL:
        return pb.Value(decimal_value=str(v))
    if isinstance(v, bool):
        return pb.Value(bool_value=v)
    if isinstance(v, int):
        return pb.Value(int_value=v)
    if isinstance(v, float):
        return pb.Value(double_value=v)
    if isinstance(v, bytes):
        return pb.Value(bytes_value=v)
    if isinstance(v, list):
        return pb.Value(list_value=pb.ListValue(values=[value(x, c.element) for x in v]))
    return pb.Value(string_value=str(v))


def row(values: Mapping[str, Any], cols: Sequence[pb.Column]) -> pb.Row:
    return pb.Row(values=[value(values.get(c.name), c) for c in cols])


def schema(cols: Sequence[pb.Column]) -> pb.TableSchema:
    fp = hashlib.sha1(repr([(c.name, c.type, c.precision) for c in cols]).encode()).hexdigest()[:16]
    return pb.TableSchema(columns=list(cols), fingerprint=fp)


@dataclass
class Source:
    """A source table: makes ChangeRecords with increasing LSNs and keeps the model."""

    prefix: str
    table: str = "customers"
    db_schema: str = "public"
    database: str = "inventory"
    cols: list[pb.Column] = field(default_factory=lambda: list(CUSTOMERS))
    lsn: int = 1000
    model: dict[Any, dict[str, Any]] = field(default_factory=dict)
    model_lsn: dict[Any, int] = field(default_factory=dict)

    @property
    def table_id(self) -> str:
        return f"{self.prefix}.{self.db_schema}.{self.table}"

    @property
    def topic(self) -> str:
        return f"inlet.changes.{self.table_id}"

    def key_names(self) -> list[str]:
        return [
            c.name for c in sorted((c for c in self.cols if c.key_position), key=lambda c: c.key_position)
        ]

    def _key(self, values: Mapping[str, Any]) -> Any:
        names = self.key_names()
        return values[names[0]] if len(names) == 1 else tuple(values[n] for n in names)

    def change(
        self,
        op: int,
        after: Mapping[str, Any] | None = None,
        before: Mapping[str, Any] | None = None,
        tx: str | None = None,
        lsn: int | None = None,
        apply: bool = True,
    ) -> tuple[str, pb.ChangeRecord]:
        if lsn is None:
            self.lsn += 10
            lsn = self.lsn
        image = after if after is not None else before
        assert image is not None
        key_vals = {n: image[n] for n in self.key_names()}
        rk = str(self._key(key_vals))
        ev = pb.ChangeEvent(
            table_id=self.table_id,
            op=op,
            record_key=rk,
            key=pb.Row(
                values=[
                    value(key_vals[n], next(c for c in self.cols if c.name == n)) for n in self.key_names()
                ]
            ),
            schema=schema(self.cols),
            schema_version=schema(self.cols).fingerprint,
            source=pb.SourcePosition(
                connector="postgresql",
                database=self.database,
                schema=self.db_schema,
                table=self.table,
                lsn=lsn,
                tx_id=lsn // 10,
                source_ts_ms=int(time.time() * 1000),
                processed_ts_ms=int(time.time() * 1000),
            ),
        )
        if after is not None:
            ev.after.CopyFrom(row(after, self.cols))
        if before is not None:
            ev.before.CopyFrom(row(before, self.cols))
        if tx:
            ev.transaction.CopyFrom(pb.TransactionRef(id=tx))
        if apply:
            self.apply(op, after, before, lsn)
        return rk, pb.ChangeRecord(change=ev)

    def apply(
        self, op: int, after: Mapping[str, Any] | None, before: Mapping[str, Any] | None, lsn: int
    ) -> None:
        if op == pb.OPERATION_UPDATE and before is not None and after is not None:
            old = self._key({n: before[n] for n in self.key_names()})
            if old != self._key(after) and lsn > self.model_lsn.get(old, -1):
                self.model.pop(old, None)
                self.model_lsn[old] = lsn
        image = after if after is not None else before
        assert image is not None
        k = self._key(image)
        if lsn <= self.model_lsn.get(k, -1):
            return  # a late, older change loses
        self.model_lsn[k] = lsn
        if op == pb.OPERATION_DELETE:
            self.model.pop(k, None)
            return
        prev = self.model.get(k, {})
        merged = {c.name: after.get(c.name) for c in self.cols}  # type: ignore[union-attr]
        for name, v in list(merged.items()):
            if v is UNCHANGED:
                merged[name] = prev.get(name)
        self.model[k] = merged

    def insert(self, **values: Any) -> tuple[str, pb.ChangeRecord]:
        return self.change(pb.OPERATION_CREATE, after=values)

    def update(self, **values: Any) -> tuple[str, pb.ChangeRecord]:
        return self.change(pb.OPERATION_UPDATE, after=values)

    def delete(self, **values: Any) -> tuple[str, pb.ChangeRecord]:
        return self.change(pb.OPERATION_DELETE, before=values)

    def end(self, tx: str, count: int) -> tuple[str, pb.ChangeRecord]:
        return "", pb.ChangeRecord(
            transaction=pb.TransactionEvent(
                id=tx, status=pb.TransactionEvent.STATUS_END, table_id=self.table_id, table_event_count=count
            )
        )

    def expected(self, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
        names = list(columns or [c.name for c in self.cols])
        rows = [{n: r.get(n) for n in names} for r in self.model.values()]
        return sorted(rows, key=lambda r: repr([r[n] for n in self.key_names()]))


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[str, pb.ChangeRecord]],
    partition: int | None = None,
    partitions: int = 1,
    end_partitions: Sequence[int] | None = None,
) -> None:
    """Produce in order; changes go to ``partition`` (or by key hash), transaction ENDs to every
    partition in ``end_partitions`` (default all)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for key, rec in records:
        if rec.WhichOneof("record") == "transaction":
            for part in end_partitions if end_partitions is not None else range(partitions):
                p.produce(
                    topic,
                    rec.SerializeToString(),
                    key=b"",
                    partition=part,
                    headers=[("inlet-kind", b"transaction")],
                )
            continue
        part = (
            partition
            if partition is not None
            else (int(hashlib.md5(key.encode()).hexdigest(), 16) % partitions)
        )
        p.produce(
            topic,
            rec.SerializeToString(),
            key=key.encode(),
            partition=part,
            headers=[("inlet-kind", b"change")],
        )
        p.poll(0)
    assert p.flush(30) == 0


def read_rows(path: str, columns: Sequence[str], key: Sequence[str]) -> list[dict[str, Any]]:
    t = HudiTable.open(path).read(meta_columns=False)
    present = [c for c in columns if c in t.column_names]
    rows = [{c: r.get(c) if c in present else None for c in columns} for r in t.select(present).to_pylist()]
    return sorted(rows, key=lambda r: repr([r[n] for n in key]))


def wait_for(check: Callable[[], Any], timeout_s: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (FileNotFoundError, AssertionError) as e:
            last = e
        except Exception as e:  # a table that does not exist yet, a commit in flight
            last = e
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def commits(path: str) -> list[tuple[str, str, dict[str, str]]]:
    """(instant, action, extraMetadata) of completed commits/deltacommits, by completion time."""
    t = HudiTable.open(path)
    tl = t.timeline
    out = []
    for i in sorted(tl.completed(("commit", "deltacommit")), key=lambda i: i.completion_time or i.time):
        out.append((i.time, i.action, tl.commit_metadata(i).extra_metadata))
    return out


def arrow_rows(table: pa.Table | None, columns: Sequence[str], key: Sequence[str]) -> list[dict[str, Any]]:
    if table is None:
        return []
    present = [c for c in columns if c in table.column_names]
    rows = [{c: r.get(c) for c in columns} for r in table.select(present).to_pylist()]
    return sorted(rows, key=lambda r: repr([r[n] for n in key]))
