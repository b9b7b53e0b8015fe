"""Comparing Apache Hudi's answer with Inlet's: the same rows, whatever their order or Arrow types.

Rows compare on the data columns and ``_hoodie_record_key`` / ``_hoodie_partition_path`` /
``_hoodie_commit_time`` (the sequence number and file name are the writer's, not a reader's choice).
Values are normalised (timestamps to UTC, integers of any width equal, JSON text parsed) so that
only what a reader returns is compared, not how Spark or Arrow typed it.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from inlet.core import HudiTable

COMMIT_TIME = "_hoodie_commit_time"
RECORD_KEY = "_hoodie_record_key"
PARTITION_PATH = "_hoodie_partition_path"
META = (COMMIT_TIME, RECORD_KEY, PARTITION_PATH)
ALL_META = (COMMIT_TIME, "_hoodie_commit_seqno", RECORD_KEY, PARTITION_PATH, "_hoodie_file_name")
CDC_COLUMNS = ("op", "ts_ms", "before", "after")

SNAPSHOT = {"hoodie.datasource.query.type": "snapshot"}
READ_OPTIMIZED = {"hoodie.datasource.query.type": "read_optimized"}


def _norm(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).astimezone(dt.UTC)
    if isinstance(value, dict):
        return tuple(sorted((k, _norm(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_norm(v) for v in value)
    if isinstance(value, decimal.Decimal):
        return value.normalize()
    return value


def rows(table: pa.Table, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """``columns`` of every row, normalised, sorted (a missing column reads as nulls)."""
    data = {
        c: table.column(c).to_pylist() if c in table.column_names else [None] * table.num_rows
        for c in columns
    }
    out = [tuple(_norm(data[c][i]) for c in columns) for i in range(table.num_rows)]
    return sorted(out, key=repr)


def _image(text: str | None, ts_ms: str, meta: list[str]) -> Any:
    image = None if text is None else json.loads(text)  # Apache Hudi 1.2 writes the JSON text null
    if image is None:
        return None
    if COMMIT_TIME in image:
        # Apache Hudi's inferred insert images carry the record's meta fields (docs/table-format.md):
        # they must be the commit's own, and are then left out of the comparison
        assert image[COMMIT_TIME] == ts_ms, f"an image of commit {image[COMMIT_TIME]} in {ts_ms}'s changes"
        meta.append(ts_ms)
    return _norm({k: v for k, v in image.items() if k not in ALL_META})


def cdc_rows(table: pa.Table, meta: list[str] | None = None) -> list[tuple[Any, ...]]:
    """A CDC query's rows: ``op``, ``ts_ms`` and the before/after images parsed from their JSON
    (``meta``: collects the commits of images that held meta fields)."""
    out = []
    seen: list[str] = [] if meta is None else meta
    for r in table.select(list(CDC_COLUMNS)).to_pylist():
        ts = str(r["ts_ms"])
        out.append((r["op"], ts, _image(r["before"], ts, seen), _image(r["after"], ts, seen)))
    return sorted(out, key=repr)


def data_columns(table: pa.Table) -> list[str]:
    return [c for c in table.column_names if c not in ALL_META]


def diff(label: str, got: list[tuple[Any, ...]], want: list[tuple[Any, ...]], columns: Sequence[str]) -> str:
    g, w = set(got), set(want)
    extra = [dict(zip(columns, r, strict=True)) for r in got if r not in w][:4]
    missing = [dict(zip(columns, r, strict=True)) for r in want if r not in g][:4]
    return (
        f"{label}: Apache Hudi {len(got)} rows, Inlet {len(want)}\n"
        f"  only Apache Hudi: {extra}\n  only Inlet:       {missing}"
    )


@dataclass
class Query:
    """One query, as Apache Hudi's read options and as Inlet's answer to it."""

    label: str
    options: dict[str, str]
    inlet: pa.Table
    cdc: bool = False
    columns: list[str] = field(default_factory=list)


def snapshot(table: HudiTable, as_of: str | None = None, read_optimized: bool = False) -> Query:
    """A snapshot (or read-optimized) query, latest or as of an instant (Apache Hudi's ``as.of.instant``)."""
    options = dict(READ_OPTIMIZED if read_optimized else SNAPSHOT)
    if as_of is not None:
        options["as.of.instant"] = as_of
    inlet = table.read(as_of=as_of, query_type="read_optimized" if read_optimized else "snapshot")
    kind = "read-optimized" if read_optimized else "snapshot"
    return Query(f"{kind} as of {as_of}" if as_of else kind, options, inlet)


def incremental(table: HudiTable, begin: str, end: str | None, inlet_begin: str | None = None) -> Query:
    """An incremental (latest state) query of ``(begin, end]``; ``inlet_begin``: Inlet's begin when
    Apache Hudi's bound differs (see docs/table-format.md)."""
    options = {
        "hoodie.datasource.query.type": "incremental",
        "hoodie.datasource.read.begin.instanttime": begin,
    }
    if end is not None:
        options["hoodie.datasource.read.end.instanttime"] = end
    inlet = table.read_changes(begin=inlet_begin or begin, end=end).table
    return Query(f"incremental ({begin}, {end}]", options, inlet)


def cdc(table: HudiTable, begin: str, end: str | None, inlet_begin: str | None = None) -> Query:
    """A CDC query (``hoodie.datasource.query.incremental.format=cdc``) of ``(begin, end]``."""
    q = incremental(table, begin, end)
    q.options["hoodie.datasource.query.incremental.format"] = "cdc"
    q.inlet = table.read_changes(begin=inlet_begin or begin, end=end, format="cdc").table
    q.label = "cdc" + q.label[len("incremental") :]
    q.cdc = True
    return q


def check(oracle: Any, path: str, queries: Sequence[Query]) -> list[str]:
    """Run every query on Apache Hudi in one round trip; the differences from Inlet's answers."""
    answers = oracle.reads([(path, q.options) for q in queries])
    problems = []
    for q, got in zip(queries, answers, strict=True):
        label = f"Apache Hudi {oracle.version}, {q.label}"
        if q.cdc:
            g, w = cdc_rows(got), cdc_rows(q.inlet)
            columns: Sequence[str] = ("op", "ts_ms", "before", "after")
        else:
            columns = [*META, *(q.columns or data_columns(q.inlet))]
            g, w = rows(got, columns), rows(q.inlet, columns)
        if g != w:
            problems.append(diff(label, g, w, columns))
    return problems


def assert_same(oracle: Any, path: str, queries: Sequence[Query]) -> None:
    problems = check(oracle, path, queries)
    assert not problems, f"{len(problems)} of {len(queries)} queries differ:\n" + "\n".join(problems)


def completed_writes(table: HudiTable) -> list[Any]:
    """The table's completed write instants (commit, deltacommit, replacecommit), oldest first."""
    return list(HudiTable.open(table.base_path).timeline.completed_writes())


def by_time(instants: Sequence[Any]) -> Mapping[str, Any]:
    return {i.time: i for i in instants}
