"""``inlet write --engine local`` and ``--engine spark`` accept the same inputs with the same result.

For every input kind (nanosecond and zone-less timestamps, unsigned integers, large strings and
binaries, dictionary-encoded columns, decimals, dates, nested lists/structs...) and every input
format the kind can be written in (Parquet as pyarrow/pandas write it, JSON lines, CSV), the same
file is written into two fresh tables, one per engine: both tables then read back with the same
schema and the same rows, or both writes fail with the same one-line error.

Runs in-process on the shared ``local[2]`` session (the CLI uses the active session).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from inlet.core import HudiTable
from inlet.services.cli.dataio import json_safe
from inlet.services.cli.main import main

T0 = dt.datetime(2024, 3, 1, 12, 30, 45, 123456, tzinfo=dt.UTC)


def _times(unit: str, tz: str | None) -> pa.Array:
    values = [T0 + dt.timedelta(seconds=i * 3601) for i in range(3)]
    if tz is None:
        values = [v.replace(tzinfo=None) for v in values]
    return pa.array(values, pa.timestamp("us", tz=tz)).cast(pa.timestamp(unit, tz=tz), safe=False)


def _ids() -> pa.Array:
    return pa.array([1, 2, 3], pa.int64())


# kind -> (data, formats it is written in). Text formats get the JSON/CSV text of the same rows.
KINDS: dict[str, tuple[pa.Table, tuple[str, ...]]] = {
    "ns_timestamps": (
        pa.table({"id": _ids(), "at": _times("ns", "UTC"), "naive": _times("ns", None)}),
        ("parquet",),
    ),
    "us_timestamps": (
        pa.table({"id": _ids(), "at": _times("us", "UTC"), "naive": _times("us", None)}),
        ("parquet", "jsonl", "csv"),
    ),
    "unsigned": (
        pa.table(
            {
                "id": _ids(),
                "u8": pa.array([0, 1, 255], pa.uint8()),
                "u16": pa.array([0, 2, 65535], pa.uint16()),
                "u32": pa.array([0, 3, 4294967295], pa.uint32()),
                "i8": pa.array([-128, 0, 127], pa.int8()),
            }
        ),
        ("parquet",),
    ),
    "map": (
        pa.table({"id": _ids(), "m": pa.array([[("a", 1)], [], None], pa.map_(pa.string(), pa.int64()))}),
        ("parquet",),
    ),
    "decimal256": (
        pa.table(
            {
                "id": _ids(),
                "d": pa.array([decimal.Decimal("1.5"), None, decimal.Decimal("-2")], pa.decimal256(20, 3)),
            }
        ),
        ("parquet",),
    ),
    "large": (
        pa.table(
            {
                "id": _ids(),
                "s": pa.array(["a", "ß", None], pa.large_string()),
                "b": pa.array([b"\x00", b"xy", None], pa.large_binary()),
            }
        ),
        ("parquet",),
    ),
    "dictionary": (
        pa.table({"id": _ids(), "city": pa.array(["sf", "nyc", "sf"]).dictionary_encode()}),
        ("parquet",),
    ),
    "decimals": (
        pa.table(
            {
                "id": _ids(),
                "price": pa.array(
                    [decimal.Decimal("1.25"), decimal.Decimal("-3.50"), None], pa.decimal128(10, 2)
                ),
                "wide": pa.array([decimal.Decimal("12345678901234567890.123456")] * 3, pa.decimal128(38, 6)),
            }
        ),
        ("parquet",),
    ),
    "dates": (
        pa.table(
            {
                "id": _ids(),
                "d": pa.array([dt.date(2024, 1, 1), dt.date(1969, 12, 31), None], pa.date32()),
                "d64": pa.array([dt.date(2024, 2, 29)] * 3, pa.date32()).cast(pa.date64()),
            }
        ),
        ("parquet", "csv"),
    ),
    "nested": (
        pa.table(
            {
                "id": _ids(),
                "tags": pa.array([["a", "b"], [], None], pa.list_(pa.string())),
                "big": pa.array([[1], [2, 3], [4]], pa.large_list(pa.int64())),
                "point": pa.array(
                    [{"x": 1.5, "y": "p"}, None, {"x": -2.0, "y": None}],
                    pa.struct([("x", pa.float64()), ("y", pa.string())]),
                ),
                "items": pa.array(
                    [[{"sku": "k1", "n": 2}], [], [{"sku": "k2", "n": None}]],
                    pa.list_(pa.struct([("sku", pa.string()), ("n", pa.int32())])),
                ),
            }
        ),
        ("parquet", "jsonl"),
    ),
    "scalars": (
        pa.table(
            {
                "id": _ids(),
                "f": pa.array([1.5, None, -0.25], pa.float32()),
                "ok": pa.array([True, False, None]),
                "n": pa.array([10, None, 30], pa.int32()),
                "name": pa.array(["x", "y,z", None]),
            }
        ),
        ("parquet", "jsonl", "csv"),
    ),
}
CASES = [(kind, fmt) for kind, (_, formats) in KINDS.items() for fmt in formats]
# second and millisecond timestamps (Parquet ms columns; JSON/CSV text of whole seconds, which
# pyarrow infers as timestamp[s]): stored as timestamp-millis by both engines
COARSE_TIMES = pa.table(
    {
        "id": _ids(),
        "at": _times("ms", "UTC"),
        "naive": _times("s", None),
        "event": pa.StructArray.from_arrays(
            [_times("ms", "UTC"), pa.array(["a", "b", "c"])], ["when", "what"]
        ),
        "history": pa.array([[T0, T0], [], None], pa.list_(pa.timestamp("us", tz="UTC"))).cast(
            pa.list_(pa.timestamp("ms", tz="UTC")), safe=False
        ),
    }
)


def _write_input(data: pa.Table, fmt: str, path: Path) -> Path:
    if fmt == "parquet":
        out = path.with_suffix(".parquet")
        pq.write_table(data, out)  # pyarrow's defaults: nanoseconds stay nanoseconds (Parquet 2.6)
    elif fmt == "jsonl":
        out = path.with_suffix(".jsonl")
        # datetimes as "YYYY-MM-DD hh:mm:ss[.ffffff][+hh:mm]": the form pyarrow's JSON reader
        # infers as timestamps (when whole seconds and zone-less)
        rows = [
            {k: v.isoformat(sep=" ") if isinstance(v, dt.datetime) else json_safe(v) for k, v in r.items()}
            for r in data.to_pylist()
        ]
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        out = path.with_suffix(".csv")
        flat = [f.name for f in data.schema if not pa.types.is_nested(f.type)]  # CSV has no nesting
        pacsv.write_csv(data.select(flat), out)
    return out


def _run(*argv: str) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(argv))
    return code, [ln for ln in err.getvalue().splitlines() if ln.startswith("inlet: error:")]


def _write(tmp_path: Path, engine: str, source: Path) -> tuple[int, list[str], str]:
    path = str(tmp_path / engine)
    code, errors = _run("table", "create", path, "--name", "t", "--record-key", "id")
    assert code == 0, errors
    code, errors = _run("write", path, "--op", "insert", "--input", str(source), "--engine", engine)
    return code, [e.replace(path, "<table>") for e in errors], path


def _contents(path: str) -> tuple[pa.Schema, list[dict[str, Any]]]:
    table = HudiTable.open(path)
    data = table.read(meta_columns=False)
    return table.schema(), sorted(data.to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize(("kind", "fmt"), CASES, ids=[f"{k}-{f}" for k, f in CASES])
def test_both_engines_write_the_same_table(spark: Any, tmp_path: Path, kind: str, fmt: str) -> None:
    source = _write_input(KINDS[kind][0], fmt, tmp_path / f"{kind}")
    local = _write(tmp_path, "local", source)
    remote = _write(tmp_path, "spark", source)
    assert (local[0], local[1]) == (remote[0], remote[1]), f"local {local[:2]} != spark {remote[:2]}"
    if local[0] != 0:
        assert len(local[1]) == 1
        return
    local_schema, local_rows = _contents(local[2])
    spark_schema, spark_rows = _contents(remote[2])
    assert spark_schema == local_schema
    assert spark_rows == local_rows
    assert len(local_rows) == KINDS[kind][0].num_rows


# inputs no Hudi table can hold: both engines refuse them with the local engine's one-line error
REFUSED = {
    "uint64": (pa.array([0, 1, 2**64 - 1], pa.uint64()), "unsigned 64-bit integers are not supported"),
    "decimal40": (
        pa.array([decimal.Decimal("1.25")] * 3, pa.decimal256(40, 2)),
        "decimal(40, 2) exceeds the maximum precision 38",
    ),
    "time": (pa.array([dt.time(1, 2)] * 3, pa.time64("us")), "type time64[us] is not supported"),
}


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_both_engines_refuse_the_same_inputs_with_the_same_error(
    spark: Any, tmp_path: Path, kind: str
) -> None:
    column, message = REFUSED[kind]
    source = _write_input(pa.table({"id": _ids(), "x": column}), "parquet", tmp_path / kind)
    results = [_write(tmp_path, engine, source) for engine in ("local", "spark")]
    assert results[0][:2] == results[1][:2]
    code, errors, _ = results[0]
    assert code == 1 and len(errors) == 1 and message in errors[0], errors
    for _, _, p in results:
        assert HudiTable.open(p).instants() == []  # refused before anything was written


def test_empty_input_writes_nothing_with_either_engine(spark: Any, tmp_path: Path) -> None:
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"id": pa.array([], pa.int64()), "v": pa.array([], pa.string())}), empty)
    blank = tmp_path / "blank.jsonl"
    blank.write_text("")
    for source in (empty, blank):
        for engine in ("local", "spark"):
            code, errors, path = _write(tmp_path / f"{source.stem}", engine, source)
            assert (code, errors) == (0, []), (source, engine)
            assert HudiTable.open(path).instants() == [], (source, engine)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_second_and_millisecond_timestamps(spark: Any, tmp_path: Path, fmt: str) -> None:
    source = _write_input(COARSE_TIMES, fmt, tmp_path / "coarse")
    local = _write(tmp_path, "local", source)
    remote = _write(tmp_path, "spark", source)
    assert (local[0], local[1]) == (remote[0], remote[1]) == (0, [])
    local_schema, local_rows = _contents(local[2])
    spark_schema, spark_rows = _contents(remote[2])
    assert spark_rows == local_rows and len(local_rows) == 3
    assert [r["naive"] for r in local_rows] == [
        dt.datetime(2024, 3, 1, 12, 30, 45, tzinfo=dt.UTC) + dt.timedelta(seconds=i * 3601) for i in range(3)
    ]  # zone-less text is taken as UTC by both
    # the unit is kept too: Spark's TimestampType has microseconds only, the Spark engine is given
    # the input's Arrow schema and stores millis as the local engine does
    assert spark_schema == local_schema
    assert spark_schema.field("naive").type == pa.timestamp("ms", tz="UTC")
    if fmt == "parquet":  # nested ones too (text formats carry no nested timestamps)
        assert spark_schema.field("event").type.field("when").type == pa.timestamp("ms", tz="UTC")
        assert spark_schema.field("history").type.value_type == pa.timestamp("ms", tz="UTC")


def _data_instants(path: str) -> list[Any]:
    return [i for i in HudiTable.open(path).instants() if i.action != "rollback"]


@pytest.mark.parametrize("index", ["simple", "bucket"])
def test_both_engines_refuse_soft_deletes_without_ordering_value_on_mor(
    spark: Any, tmp_path: Path, index: str
) -> None:
    """The MOR event-time rule (a delete block records each delete's ordering value) is one rule:
    both engines refuse a ``_hoodie_is_deleted`` row whose ordering value is null, with one error,
    and write nothing."""
    first = pa.table({"id": _ids(), "ts": pa.array([1, 1, 1], pa.int64()), "v": ["a", "b", "c"]})
    soft = pa.table(
        {
            "id": pa.array([2], pa.int64()),
            "ts": pa.array([None], pa.int64()),
            "v": ["b"],
            "_hoodie_is_deleted": [True],
        }
    )
    out = []
    for engine in ("local", "spark"):
        path = str(tmp_path / engine)
        base = ["table", "create", path, "--name", "t", "--record-key", "id", "--ordering-field", "ts"]
        assert _run(*base, "--type", "mor", "--index", index)[0] == 0
        pq.write_table(first, tmp_path / "first.parquet")
        assert _run("write", path, "--op", "upsert", "--input", str(tmp_path / "first.parquet"))[0] == 0
        pq.write_table(soft, tmp_path / "soft.parquet")
        before = _data_instants(path)
        code, errors = _run(
            "write", path, "--op", "upsert", "--input", str(tmp_path / "soft.parquet"), "--engine", engine
        )
        # nothing written and nothing pending (Spark finds the bad row in a task, after its instant
        # began, so its abort leaves a completed rollback, as Apache Hudi's does)
        assert _data_instants(path) == before, engine
        assert all(i.state.name == "COMPLETED" for i in HudiTable.open(path).instants()), engine
        out.append((code, [e.replace(path, "<table>") for e in errors]))
    assert out[0] == out[1], out
    code, errors = out[0]
    assert code == 1 and len(errors) == 1 and "need a value in the ordering field 'ts'" in errors[0], errors
