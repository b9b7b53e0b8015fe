"""The ``inlet`` CLI against tables in tmp_path.

``run`` starts the real CLI as a subprocess (``python -m inlet.services.cli.main``); it covers
the main flows and the main error cases. To keep the file fast, further cases call ``main()``
in-process (``call``, same stdout/stderr/exit status), tables are set up and checked with
``inlet.core`` where that is not what a test is about, and independent subprocesses run in
parallel. Expected values are computed from the input rows, never copied from the CLI's output.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import datetime as dt
import decimal
import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from inlet.core import HudiTable
from inlet.core.table.properties import read_properties
from inlet.services.cli.dataio import json_safe
from inlet.services.cli.errors import UsageError
from inlet.services.cli.filters import parse_filter
from inlet.services.cli.main import main

INLET = [sys.executable, "-m", "inlet.services.cli.main"]
WORKERS = max(2, min(6, os.cpu_count() or 2))

RIDES: list[dict[str, Any]] = [
    {"id": 1, "city": "sf", "rider": "ana", "fare": 18.5, "ts": 100, "passengers": 1},
    {"id": 2, "city": "sf", "rider": "bo", "fare": 32.25, "ts": 100, "passengers": 2},
    {"id": 3, "city": "ny", "rider": "cy", "fare": 12.75, "ts": 100, "passengers": 1},
    {"id": 4, "city": "ny", "rider": "di", "fare": 45.5, "ts": 100, "passengers": 3},
    {"id": 5, "city": "la", "rider": "ed", "fare": 22.5, "ts": 100, "passengers": 1},
    {"id": 6, "city": "la", "rider": "fay", "fare": 9.25, "ts": 100, "passengers": 4},
]
CREATE_ARGS = ["--name", "rides", "--record-key", "id", "--partition-by", "city", "--ordering-field", "ts"]

Result = subprocess.CompletedProcess[str]


# ------------------------------------------------------------------------------ running the CLI


def run(*args: Any, env: dict[str, str] | None = None) -> Result:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("INLET_")}
    clean.update(env or {})
    return subprocess.run([*INLET, *map(str, args)], capture_output=True, text=True, env=clean, timeout=120)


@contextlib.contextmanager
def _environment(env: dict[str, str] | None) -> Iterator[None]:
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("INLET_")]:
        del os.environ[key]
    os.environ.update(env or {})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _logging_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.captureWarnings(False)


def call(*args: Any, env: dict[str, str] | None = None) -> Result:
    """Run ``main()`` in this process, capturing stdout and stderr like ``run``."""
    out, err = io.StringIO(), io.StringIO()
    argv = [str(a) for a in args]
    with (
        _environment(env),
        _logging_restored(),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = main(argv)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def run_all(calls: Sequence[Sequence[Any]]) -> list[Result]:
    """Run independent CLI invocations in parallel; results in the order of ``calls``."""
    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(lambda args: run(*args), calls))


def ok(*args: Any, env: dict[str, str] | None = None) -> str:
    """Stdout of a successful subprocess run."""
    return stdout_of(run(*args, env=env))


def ok_here(*args: Any, env: dict[str, str] | None = None) -> str:
    """Stdout of a successful in-process call."""
    return stdout_of(call(*args, env=env))


def stdout_of(result: Result) -> str:
    assert result.returncode == 0, f"{result.args} failed: {result.stderr}"
    return result.stdout


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def by_id(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["id"])


def cli_rows(text: str) -> list[dict[str, Any]]:
    return by_id(json_lines(text))


def assert_one_error(result: Result, *names: str, code: int | None = None) -> None:
    assert result.returncode != 0, result.stdout
    if code is not None:
        assert result.returncode == code, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one stderr line, got:\n{result.stderr}"
    assert lines[0].startswith("inlet: error:"), lines[0]
    for name in names:
        assert name.lower() in lines[0].lower(), f"{name!r} not named in: {lines[0]}"
    assert result.stdout == ""


# ------------------------------------------------------------------------------ tables and files


def make_table(path: Path, **overrides: Any) -> Path:
    kwargs: dict[str, Any] = {
        "name": "rides",
        "record_key": "id",
        "partition_by": "city",
        "ordering_field": "ts",
        **overrides,
    }
    HudiTable.create(str(path), **kwargs)
    return path


def table_rows(path: Path) -> list[dict[str, Any]]:
    return by_id(HudiTable.open(str(path)).read(meta_columns=False).to_pylist())


def full_state(path: Path) -> tuple[list[dict[str, Any]], list[Any]]:
    """Every row with its meta columns (commit time, file name...) and the timeline."""
    table = HudiTable.open(str(path))
    rows = sorted(table.read().to_pylist(), key=lambda r: r["_hoodie_record_key"])
    return rows, table.instants()


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


WRITERS: dict[str, Callable[[Path, list[dict[str, Any]]], Path]] = {
    "jsonl": write_jsonl,
    "csv": write_csv,
    "parquet": write_parquet,
}


@dataclass
class Rides:
    """A table holding RIDES (one CLI insert) that tests must not change."""

    path: Path
    commit: dict[str, Any]


@pytest.fixture(scope="module")
def rides(tmp_path_factory: pytest.TempPathFactory) -> Rides:
    base = tmp_path_factory.mktemp("rides")
    table = make_table(base / "rides")
    commit = json.loads(
        ok_here("write", table, "--op", "insert", "--input", write_jsonl(base / "in.jsonl", RIDES))
    )
    return Rides(table, commit)


# ------------------------------------------------------------------------------ writes


def test_write_and_read_each_input_format(tmp_path: Path) -> None:
    tables = {fmt: make_table(tmp_path / fmt) for fmt in WRITERS}
    sources = {fmt: writer(tmp_path / f"rides.{fmt}", RIDES) for fmt, writer in WRITERS.items()}
    writes = run_all([("write", tables[f], "--op", "insert", "--input", sources[f]) for f in WRITERS])
    reads = run_all([("read", tables[f], "--no-meta") for f in WRITERS])
    for fmt, written, read in zip(WRITERS, writes, reads, strict=True):
        summary = json.loads(stdout_of(written))
        assert (summary["operation"], summary["action"], summary["inserts"]) == (
            "INSERT",
            "commit",
            len(RIDES),
        )
        assert cli_rows(stdout_of(read)) == by_id(RIDES), fmt


def test_format_option_overrides_the_extension(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    source = write_csv(tmp_path / "rides.data", RIDES)
    assert_one_error(
        call("write", table, "--op", "insert", "--input", source), "rides.data", "--input-format"
    )
    ok_here("write", table, "--op", "insert", "--input", source, "--input-format", "csv")
    assert table_rows(table) == by_id(RIDES)


def test_csv_is_parsed_with_the_table_types(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t", name="zips", partition_by=None, ordering_field=None)
    ok_here(
        "write", table, "--op", "insert", "--input", write_csv(tmp_path / "a.csv", [{"id": 1, "zip": "N1"}])
    )
    second = [{"id": 2, "zip": "00501"}, {"id": 3, "zip": "10"}]  # digits, but the column holds strings
    ok_here("write", table, "--op", "insert", "--input", write_csv(tmp_path / "b.csv", second))
    assert table_rows(table) == [{"id": 1, "zip": "N1"}, *second]
    assert HudiTable.open(str(table)).schema() == pa.schema([("id", pa.int64()), ("zip", pa.string())])


def test_empty_input_writes_nothing(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    HudiTable.open(str(table)).write(pa.Table.from_pylist(RIDES), "insert")
    before = full_state(table)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = call("write", table, "--op", "upsert", "--input", empty)
    summary = json.loads(stdout_of(result))
    assert summary["instant"] is None and summary["inserts"] == summary["updates"] == 0
    assert "no records" in result.stderr
    assert full_state(table) == before


def test_create_upsert_delete_and_time_travel(tmp_path: Path) -> None:
    table = tmp_path / "t"
    assert "rides" in ok("table", "create", table, *CREATE_ARGS)
    first = json.loads(
        ok("write", table, "--op", "insert", "--input", write_jsonl(tmp_path / "a.jsonl", RIDES))
    )
    newer = {**RIDES[0], "fare": 99.5, "ts": 200}  # newer event time: wins
    stale = {**RIDES[1], "fare": 1.5, "ts": 50}  # older event time: must lose
    added = {"id": 7, "city": "ny", "rider": "gus", "fare": 5.5, "ts": 100, "passengers": 2}
    changes = write_jsonl(tmp_path / "b.jsonl", [newer, stale, added])
    second = json.loads(ok("write", table, "--op", "upsert", "--input", changes))
    assert (second["inserts"], second["updates"]) == (1, 1)
    doomed = RIDES[3]
    keys = write_csv(tmp_path / "del.csv", [{"id": doomed["id"], "city": doomed["city"]}])
    third = json.loads(ok("write", table, "--op", "delete", "--input", keys))
    assert third["deletes"] == 1

    expected = {r["id"]: r for r in RIDES}
    expected[newer["id"]] = newer
    expected[added["id"]] = added
    del expected[doomed["id"]]
    latest, as_of, timeline_json = run_all(
        [
            ("read", table, "--no-meta"),
            ("read", table, "--no-meta", "--as-of", first["instant"]),
            ("timeline", table, "--json"),
        ]
    )
    assert cli_rows(stdout_of(latest)) == by_id(list(expected.values()))
    assert cli_rows(stdout_of(as_of)) == by_id(RIDES)
    timeline = json_lines(stdout_of(timeline_json))
    commits = [first, second, third]
    assert [i["instant"] for i in timeline] == [c["instant"] for c in commits]
    assert [i["completion_time"] for i in timeline] == [c["completion_time"] for c in commits]
    assert all(i["state"] == "COMPLETED" and i["action"] == "commit" for i in timeline)
    timeline_text = ok_here("timeline", table)
    assert all(c["instant"] in timeline_text for c in commits)


def test_delete_partition_and_insert_overwrite(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    HudiTable.open(str(table)).write(pa.Table.from_pylist(RIDES), "insert")
    dropped = json.loads(ok_here("write", table, "--op", "delete_partition", "--partition", "ny"))
    assert dropped["action"] == "replacecommit" and dropped["replaced_file_groups"] >= 1
    assert table_rows(table) == by_id([r for r in RIDES if r["city"] != "ny"])
    replacement = [{"id": 50, "city": "la", "rider": "zed", "fare": 7.5, "ts": 1, "passengers": 1}]
    ok_here(
        "write", table, "--op", "insert_overwrite", "--input", write_jsonl(tmp_path / "b.jsonl", replacement)
    )
    assert table_rows(table) == by_id([*(r for r in RIDES if r["city"] == "sf"), *replacement])


def test_bulk_insert_with_sort_mode_and_options(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    source = write_parquet(tmp_path / "a.parquet", list(reversed(RIDES)))
    summary = json.loads(
        ok_here(
            "write", table, "--op", "bulk_insert", "--input", source, "--sort-mode", "global_sort",
            "--option", "hoodie.parquet.compression.codec=gzip",
        )
    )  # fmt: skip
    assert summary["operation"] == "BULK_INSERT" and summary["inserts"] == len(RIDES)
    data_files = [p for p in table.rglob("*.parquet") if ".hoodie" not in p.parts]
    assert data_files
    for path in data_files:
        assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "GZIP"
        keys = pq.read_table(path, columns=["_hoodie_record_key"]).column(0).to_pylist()
        assert keys == sorted(keys)  # the input was in reverse order
    assert table_rows(table) == by_id(RIDES)


def test_rollback_of_a_crashed_write(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    HudiTable.open(str(table)).write(pa.Table.from_pylist(RIDES), "insert")
    before = full_state(table)
    change = write_jsonl(tmp_path / "b.jsonl", [{**r, "fare": 0.5, "ts": 999} for r in RIDES])
    crashed = run(
        "write", table, "--op", "upsert", "--input", change, env={"INLET_CRASH_AT": "after_data_files"}
    )
    assert crashed.returncode != 0
    pending = [i for i in HudiTable.open(str(table)).instants() if not i.is_completed]
    assert len(pending) == 1
    assert full_state(table)[0] == before[0]  # readers never see the uncommitted files
    assert json.loads(ok_here("rollback", table, "--force")) == {"rolled_back": [pending[0].time]}
    rows, timeline = full_state(table)
    assert rows == before[0]
    assert all(i.is_completed for i in timeline) and timeline[-1].action == "rollback"


# ------------------------------------------------------------------------------ reads


def test_filters_and_columns(rides: Rides) -> None:
    sf_dear, far_single, not_bo = run_all(
        [
            ("read", rides.path, "--filter", "city == sf", "--filter", "fare > 20", "--columns", "id,fare"),
            (
                "read",
                rides.path,
                "--filter",
                "city in ny,la",
                "--filter",
                "passengers <= 1",
                "--columns",
                "rider,id",
            ),
            ("read", rides.path, "--filter", "rider != 'bo'", "--filter", "id >= 2", "--columns", "id"),
        ]
    )
    want = [{"id": r["id"], "fare": r["fare"]} for r in RIDES if r["city"] == "sf" and r["fare"] > 20]
    assert cli_rows(stdout_of(sf_dear)) == by_id(want)
    got = cli_rows(stdout_of(far_single))
    want = [
        {"rider": r["rider"], "id": r["id"]}
        for r in RIDES
        if r["city"] in ("ny", "la") and r["passengers"] <= 1
    ]
    assert got == by_id(want)
    assert [list(r) for r in got] == [["rider", "id"]] * len(want)  # column order as requested
    assert cli_rows(stdout_of(not_bo)) == [
        {"id": r["id"]} for r in by_id(RIDES) if r["rider"] != "bo" and r["id"] >= 2
    ]


def test_meta_columns_limit_and_parquet_output(rides: Rides, tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    with_meta = call("read", rides.path)
    limited = call("read", rides.path, "--limit", "2")
    to_file = call("read", rides.path, "--no-meta", "--output", out)
    rows = json_lines(stdout_of(with_meta))
    assert len(rows) == len(RIDES)
    assert {r["_hoodie_commit_time"] for r in rows} == {rides.commit["instant"]}
    assert {r["_hoodie_record_key"] for r in rows} == {str(r["id"]) for r in RIDES}
    assert {r["_hoodie_partition_path"] for r in rows} == {r["city"] for r in RIDES}
    assert len(json_lines(stdout_of(limited))) == 2
    assert json.loads(stdout_of(to_file))["rows"] == len(RIDES)
    assert by_id(pq.read_table(out).to_pylist()) == by_id(RIDES)


def test_read_values_are_json_safe(tmp_path: Path) -> None:
    at = dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
    rows = [
        {
            "id": 1,
            "at": at,
            "day": dt.date(2024, 1, 2),
            "amount": decimal.Decimal("12.34"),
            "blob": b"\x00hi",
        },
        {"id": 2, "at": None, "day": dt.date(2023, 12, 31), "amount": decimal.Decimal("-0.01"), "blob": b""},
    ]
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("day", pa.date32()),
            ("amount", pa.decimal128(10, 2)),
            ("blob", pa.binary()),
        ]
    )
    source = tmp_path / "typed.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), source)
    table = make_table(tmp_path / "t", name="typed", partition_by=None, ordering_field=None)
    ok_here("write", table, "--op", "insert", "--input", source)
    got = cli_rows(ok_here("read", table, "--no-meta"))
    assert dt.datetime.fromisoformat(got[0]["at"]) == at and got[1]["at"] is None
    assert [dt.date.fromisoformat(r["day"]) for r in got] == [r["day"] for r in rows]
    assert [decimal.Decimal(r["amount"]) for r in got] == [r["amount"] for r in rows]
    assert [base64.b64decode(r["blob"]) for r in got] == [r["blob"] for r in rows]


# ------------------------------------------------------------------------------ table commands


def test_describe(rides: Rides) -> None:
    as_json, as_text = run("table", "describe", rides.path, "--json"), call("table", "describe", rides.path)
    info = json.loads(stdout_of(as_json))
    assert info["name"] == "rides"
    assert info["record_key_fields"] == ["id"] and info["partition_fields"] == ["city"]
    assert info["ordering_field"] == "ts" and info["merge_mode"] == "EVENT_TIME_ORDERING"
    assert info["latest_commit"] == rides.commit["instant"]
    assert [s.split(":")[0] for s in info["schema"]] == list(RIDES[0])
    assert "rides" in stdout_of(as_text) and rides.commit["instant"] in stdout_of(as_text)


def test_create_options_reach_the_table(tmp_path: Path) -> None:
    events, bucketed, mor = tmp_path / "events", tmp_path / "bucketed", tmp_path / "mor"
    results = [
        call(*args)
        for args in [
            ("table", "create", events, "--name", "events", "--record-key", "id", "--partition-by", "ts",
             "--key-generator", "timestamp", "--timestamp-type", "epochmilliseconds",
             "--timestamp-output-format", "yyyy/MM/dd", "--hive-style"),
            ("table", "create", bucketed, "--name", "b", "--record-key", "id", "--index", "bucket",
             "--buckets", "3", "--type", "COW", "--merge-mode", "commit_time_ordering", "--database", "lake"),
            ("table", "create", mor, "--name", "m", "--type", "mor", "--record-key", "id,region"),
        ]
    ]  # fmt: skip
    for result in results:
        stdout_of(result)
    info = HudiTable.open(str(bucketed)).describe()
    assert (info["index"], info["buckets"], info["merge_mode"]) == ("BUCKET", 3, "COMMIT_TIME_ORDERING")
    assert info["properties"]["hoodie.database.name"] == "lake"
    info = HudiTable.open(str(mor)).describe()
    assert (info["table_type"], info["record_key_fields"]) == ("MERGE_ON_READ", ["id", "region"])

    rows = [{"id": 1, "ts": 1_700_000_000_000}, {"id": 2, "ts": 1_710_000_000_000}]
    ok_here("write", events, "--op", "insert", "--input", write_jsonl(tmp_path / "ev.jsonl", rows))
    got = HudiTable.open(str(events)).read(columns=["id", "_hoodie_partition_path"]).to_pylist()
    want = {
        r["id"]: "ts=" + dt.datetime.fromtimestamp(r["ts"] / 1000, dt.UTC).strftime("%Y/%m/%d") for r in rows
    }
    assert {r["id"]: r["_hoodie_partition_path"] for r in got} == want


def test_environment_variables_and_json_logs(rides: Rides, tmp_path: Path) -> None:
    target = make_table(tmp_path / "t")
    source = write_csv(tmp_path / "rides.txt", RIDES)
    env = {"INLET_LOG_LEVEL": "INFO", "INLET_LOG_FORMAT": "json", "INLET_INPUT_FORMAT": "csv"}
    from_env = call("read", "--no-meta", env={"INLET_TABLE_PATH": str(rides.path)})
    assert cli_rows(stdout_of(from_env)) == by_id(RIDES)
    written = run("write", target, "--op", "upsert", "--input", source, env=env)
    events = [json.loads(line) for line in written.stderr.splitlines()]
    started = next(e for e in events if e["message"] == "write started")
    finished = next(e for e in events if e["message"] == "write finished")
    assert started["rows"] == len(RIDES) and started["level"] == "INFO"
    assert finished["inserts"] == len(RIDES) and finished["elapsed_s"] >= 0
    assert finished["instant"] == json.loads(stdout_of(written))["instant"]
    assert table_rows(target) == by_id(RIDES)


def test_help_lists_commands_and_environment() -> None:
    script = Path(sys.executable).with_name("inlet")
    if not script.exists():
        pytest.skip(f"no console script next to {sys.executable}")
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    text = stdout_of(result)
    for word in ("table", "write", "read", "timeline", "rollback", "INLET_LOG_LEVEL", "INLET_LOG_FORMAT"):
        assert word in text


# ------------------------------------------------------------------------------ errors


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]  # {table}, {mor}, {bad}, {tmp} are filled in
    names: tuple[str, ...]  # what the error line must mention
    code: int
    env: dict[str, str] = field(default_factory=dict)


ERRORS: dict[str, Case] = {
    # failed writes: the rides table must read exactly as before
    "string into int column": Case(
        ("write", "{table}", "--op", "upsert", "--input", "{bad}/wrong_type.jsonl"), ("passengers",), 1
    ),
    "corrupt parquet": Case(
        ("write", "{table}", "--op", "insert", "--input", "{bad}/corrupt.parquet"), ("corrupt.parquet",), 1
    ),
    "unknown op": Case(
        ("write", "{table}", "--op", "frobnicate", "--input", "{bad}/wrong_type.jsonl"), ("--op", "frobnicate"), 2
    ),
    "missing input file": Case(
        ("write", "{table}", "--op", "insert", "--input", "{bad}/absent.jsonl"), ("absent.jsonl", "not found"), 1
    ),
    "invalid json": Case(("write", "{table}", "--op", "insert", "--input", "{bad}/broken.jsonl"), ("broken.jsonl",), 1),
    "text into a double column (csv)": Case(
        ("write", "{table}", "--op", "upsert", "--input", "{bad}/wrong_type.csv"), ("fare", "many"), 1
    ),
    "ragged csv": Case(("write", "{table}", "--op", "insert", "--input", "{bad}/ragged.csv"), ("ragged.csv",), 1),
    "delete without partition column": Case(
        ("write", "{table}", "--op", "delete", "--input", "{bad}/no_partition.jsonl"), ("city",), 1
    ),
    "insert without record key": Case(
        ("write", "{table}", "--op", "insert", "--input", "{bad}/no_key.jsonl"), ("'id'",), 1
    ),
    "missing --input": Case(("write", "{table}", "--op", "upsert"), ("--input",), 2),
    "option without value": Case(
        ("write", "{table}", "--op", "upsert", "--input", "{bad}/no_key.jsonl", "--option", "x"), ("'x'",), 2
    ),
    "MOR insert without record key": Case(
        ("write", "{mor}", "--op", "insert", "--input", "{bad}/no_key.jsonl"), ("'id'",), 1
    ),
    "write to missing table": Case(
        ("write", "{tmp}/no-table", "--op", "insert", "--input", "{bad}/no_key.jsonl"), ("no-table",), 1
    ),
    # reads
    "unknown column in --columns": Case(("read", "{table}", "--columns", "id,nope"), ("nope",), 1),
    "unknown column in --filter": Case(("read", "{table}", "--filter", "nope == 1"), ("nope",), 1),
    "filter value of the wrong type": Case(("read", "{table}", "--filter", "id == abc"), ("abc", "id"), 1),
    "filter without operator": Case(("read", "{table}", "--filter", "city sf"), ("city sf",), 2),
    "bad as-of time": Case(("read", "{table}", "--as-of", "yesterday"), ("yesterday",), 1),
    "negative limit": Case(("read", "{table}", "--limit", "-1"), ("--limit",), 2),
    "read missing table": Case(("read", "{tmp}/no-table"), ("no-table", "no Hudi table"), 1),
    # other commands and arguments
    "timeline without path": Case(("timeline",), ("PATH", "INLET_TABLE_PATH"), 2),
    "create over a table": Case(("table", "create", "{table}", *CREATE_ARGS), ("already exists",), 1),
    "create with bad name": Case(("table", "create", "{tmp}/x", "--name", "bad name", "--record-key", "id"), ("bad name",), 1),
    "create without record key": Case(("table", "create", "{tmp}/y", "--name", "y"), ("--record-key",), 2),
    "buckets without bucket index": Case(
        ("table", "create", "{tmp}/z", "--name", "z", "--record-key", "id", "--buckets", "2"), ("--buckets",), 2
    ),
    "no command": Case((), ("COMMAND",), 2),
    "bad INLET_LOG_LEVEL": Case(("read", "{table}"), ("INLET_LOG_LEVEL", "chatty"), 2, {"INLET_LOG_LEVEL": "chatty"}),
}  # fmt: skip
# run as real subprocesses; the other cases call main() in-process
SUBPROCESS_CASES = {
    "string into int column",
    "corrupt parquet",
    "unknown op",
    "missing input file",
    "unknown column in --columns",
    "read missing table",
    "write to missing table",
}


@dataclass
class ErrorRuns:
    results: dict[str, Result]
    before: tuple[list[dict[str, Any]], list[Any]]
    after: tuple[list[dict[str, Any]], list[Any]]
    tmp: Path


@pytest.fixture(scope="module")
def error_runs(rides: Rides, tmp_path_factory: pytest.TempPathFactory) -> ErrorRuns:
    """Every ERRORS case, run once against the rides table and bad input files."""
    bad = tmp_path_factory.mktemp("bad")
    tmp = tmp_path_factory.mktemp("errors")
    (bad / "corrupt.parquet").write_bytes(b"PAR1 this is not really parquet")
    write_jsonl(bad / "wrong_type.jsonl", [{**RIDES[0], "id": 100, "passengers": "many"}])
    (bad / "broken.jsonl").write_text('{"id": 100, "city": "sf", "ts": 1\n')
    write_csv(bad / "wrong_type.csv", [{**RIDES[0], "id": 100, "fare": "many"}])
    (bad / "ragged.csv").write_text("id,city,ts\n100,sf,1\n101,ny\n")
    write_jsonl(bad / "no_partition.jsonl", [{"id": 1}])
    write_jsonl(bad / "no_key.jsonl", [{k: v for k, v in RIDES[0].items() if k != "id"}])
    mor = make_table(tmp / "mor", table_type="mor")
    before = full_state(rides.path)
    places = {"table": rides.path, "mor": mor, "bad": bad, "tmp": tmp}

    def args_of(name: str) -> list[str]:
        return [a.format(**places) for a in ERRORS[name].args]

    results = {
        name: call(*args_of(name), env=ERRORS[name].env) for name in ERRORS if name not in SUBPROCESS_CASES
    }
    in_subprocess = sorted(SUBPROCESS_CASES)
    with ThreadPoolExecutor(WORKERS) as pool:
        ran = pool.map(lambda name: run(*args_of(name), env=ERRORS[name].env), in_subprocess)
        results.update(zip(in_subprocess, ran, strict=True))
    return ErrorRuns(results, before, full_state(rides.path), tmp)


@pytest.mark.parametrize("case", list(ERRORS))
def test_error_is_one_line_naming_the_problem(case: str, error_runs: ErrorRuns) -> None:
    expected = ERRORS[case]
    assert_one_error(error_runs.results[case], *expected.names, code=expected.code)
    assert "Traceback" not in error_runs.results[case].stderr


def test_failed_commands_leave_tables_unchanged(error_runs: ErrorRuns) -> None:
    rows, timeline = error_runs.after
    assert rows == error_runs.before[0]
    assert timeline == error_runs.before[1]
    assert not (error_runs.tmp / "no-table").exists()
    assert not any((error_runs.tmp / name).exists() for name in ("x", "y", "z"))


# ------------------------------------------------------------------------------ in-process units


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("fare >= 10", ("fare", ">=", "10")),
        ("fare>=10", ("fare", ">=", "10")),
        ("city == 'san francisco'", ("city", "==", "san francisco")),
        ("city = sf", ("city", "=", "sf")),
        ("a != b", ("a", "!=", "b")),
        ("n < -1", ("n", "<", "-1")),
        ("note == x<y", ("note", "==", "x<y")),
        ("origin in sf, ny ,la", ("origin", "in", ["sf", "ny", "la"])),
        ("city NOT IN sf", ("city", "not in", ["sf"])),
    ],
)
def test_parse_filter(text: str, expected: tuple[str, str, Any]) -> None:
    assert parse_filter(text) == expected


@pytest.mark.parametrize("text", ["city sf", "== 3", "fare >=", "city in ,"])
def test_parse_filter_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_filter(text)


def test_json_safe() -> None:
    value = {
        "t": dt.time(1, 2, 3),
        "d": dt.timedelta(seconds=90),
        "nan": float("nan"),
        "inf": float("-inf"),
        "nested": [{"b": bytearray(b"\xff")}, (decimal.Decimal("1.50"),)],
    }
    assert json.loads(json.dumps(json_safe(value), allow_nan=False)) == {
        "t": "01:02:03",
        "d": 90.0,
        "nan": "nan",
        "inf": "-inf",
        "nested": [{"b": base64.b64encode(b"\xff").decode()}, ["1.50"]],
    }


def test_merge_on_read_upsert_snapshot_and_read_optimized(tmp_path: Path) -> None:
    table = tmp_path / "mor"
    assert run("table", "create", table, *CREATE_ARGS, "--type", "mor").returncode == 0
    first = tmp_path / "first.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in RIDES))
    assert run("write", table, "--op", "insert", "--input", first).returncode == 0
    change = tmp_path / "change.jsonl"
    change.write_text(json.dumps({**RIDES[0], "fare": 99.0, "ts": 200}) + "\n")
    out = run("write", table, "--op", "upsert", "--input", change)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["action"] == "deltacommit"

    def fares(*extra: str) -> dict[int, float]:
        res = run("read", table, "--no-meta", "--columns", "id,fare", *extra)
        assert res.returncode == 0, res.stderr
        return {r["id"]: r["fare"] for r in map(json.loads, res.stdout.splitlines())}

    # the update lives in a log file: snapshot merges it, read-optimized sees only base files
    assert fares()[1] == 99.0
    assert fares("--query-type", "read_optimized")[1] == RIDES[0]["fare"]
    assert set(fares()) == {r["id"] for r in RIDES}


def test_cli_table_create_cdc_writes_hudis_cdc_keys(tmp_path: Path) -> None:
    table = tmp_path / "cdc"
    ok_here(
        "table",
        "create",
        table,
        "--name",
        "c",
        "--record-key",
        "id",
        "--cdc",
        "--cdc-logging-mode",
        "op_key_only",
    )
    props = read_properties(HudiTable.open(str(table)).storage)
    assert props["hoodie.table.cdc.enabled"] == "true"
    assert props["hoodie.table.cdc.supplemental.logging.mode"] == "OP_KEY_ONLY"
    bad = call(
        "table",
        "create",
        tmp_path / "x",
        "--name",
        "x",
        "--record-key",
        "id",
        "--cdc-logging-mode",
        "DATA_BEFORE",
    )
    assert bad.returncode != 0 and "--cdc-logging-mode needs --cdc" in bad.stderr
