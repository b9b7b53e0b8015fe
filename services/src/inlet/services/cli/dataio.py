"""Reading input files (Parquet, JSON lines, CSV) and writing results (JSON lines, Parquet)."""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import json
import math
import os
import re
from collections.abc import Iterator
from typing import IO, Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from inlet.services.cli.errors import CliError, InputFileError

INPUT_FORMATS = ("parquet", "jsonl", "csv")
_EXTENSIONS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
}
_COMPRESSIONS = (".gz", ".bz2", ".zst", ".lz4")


def detect_format(path: str) -> str:
    """The input format named by the file extension (``.csv.gz`` counts as ``csv``)."""
    name = os.path.basename(path).lower()
    for suffix in _COMPRESSIONS:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    fmt = _EXTENSIONS.get(os.path.splitext(name)[1])
    if fmt is None:
        raise InputFileError(
            f"cannot tell the format of {path} from its extension; pass --input-format {'|'.join(INPUT_FORMATS)}"
        )
    return fmt


def _csv_column_types(schema: pa.Schema | None) -> dict[str, pa.DataType]:
    """Types CSV text is parsed as: the table's, for the scalar types CSV converts reliably.

    CSV has no types, so inference alone would turn a string column of digits (zip codes) into
    numbers, or widen an int32 column to int64. Timestamps are left to inference (the table's
    time zone handling casts them).
    """
    if schema is None:
        return {}
    t = pa.types
    return {
        f.name: f.type
        for f in schema
        if t.is_integer(f.type)
        or t.is_floating(f.type)
        or t.is_string(f.type)
        or t.is_large_string(f.type)
        or t.is_boolean(f.type)
        or t.is_decimal(f.type)
        or t.is_date(f.type)
    }


def _name_csv_column(message: str, path: str) -> str:
    """Replace pyarrow's ``In CSV column #N`` by the column's name from the header."""
    m = re.search(r"In CSV column #(\d+)", message)
    if m is None:
        return message
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            header = next(csv.reader(f), [])
        name = header[int(m.group(1))]
    except (OSError, IndexError):
        return message
    return message.replace(m.group(0), f"column {name!r}")


def _read(path: str, fmt: str, schema: pa.Schema | None) -> pa.Table:
    if fmt == "parquet":
        return pq.read_table(path)
    if fmt == "jsonl":
        return pajson.read_json(path)
    convert = pacsv.ConvertOptions(column_types=_csv_column_types(schema))
    return pacsv.read_csv(path, convert_options=convert)


def read_input(path: str, fmt: str | None = None, schema: pa.Schema | None = None) -> pa.Table:
    """Read a whole input file as an Arrow table; any problem is an :class:`InputFileError`.

    ``schema`` (the table's) guides the parsing of CSV text.
    """
    if not os.path.exists(path):
        raise InputFileError(f"input file not found: {path}")
    fmt = fmt or detect_format(path)
    if os.path.isdir(path) and fmt != "parquet":
        raise InputFileError(f"input {path} is a directory, not a {fmt} file")
    if fmt != "parquet" and os.path.getsize(path) == 0:
        return pa.table({})  # an empty text file holds no records (pyarrow rejects it)
    try:
        return _read(path, fmt, schema)
    except (pa.ArrowException, OSError, ValueError) as e:
        message = _name_csv_column(str(e), path) if fmt == "csv" else str(e)
        raise InputFileError(f"cannot read {path} as {fmt}: {message}") from e


def json_safe(value: Any) -> Any:
    """A JSON-serialisable form of an Arrow Python value.

    Timestamps, dates and times become ISO-8601 strings, decimals strings, bytes base64,
    durations seconds, NaN/Infinity strings; lists and dicts are converted recursively.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return str(value)


def json_rows(table: pa.Table) -> Iterator[str]:
    """One JSON object per row, as text."""
    for batch in table.to_batches():
        for row in batch.to_pylist(maps_as_pydicts="lossy"):
            yield json.dumps(json_safe(row), ensure_ascii=False)


def write_json_lines(table: pa.Table, out: IO[str]) -> None:
    for line in json_rows(table):
        out.write(line + "\n")


def write_parquet(table: pa.Table, path: str) -> None:
    try:
        pq.write_table(table, path)
    except OSError as e:
        raise CliError(f"cannot write {path}: {e}") from e
