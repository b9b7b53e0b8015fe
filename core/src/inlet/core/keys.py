"""Record keys and partition paths, computed the way Apache Hudi's key generators do.

- record key: one field -> the value as text; several fields (complex) -> ``f1:v1,f2:v2`` with
  ``__null__`` / ``__empty__`` for null / empty values;
- partition path: values of the partition fields joined by ``/``, ``field=value`` when
  hive-style, ``__HIVE_DEFAULT_PARTITION__`` for null or empty, optional URL-style escaping,
  and timestamp-based formatting (``yyyy/MM/dd`` from epoch numbers, date strings or timestamps).

Everything is vectorised over Arrow columns.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from inlet.core.config import KeyGeneratorType
from inlet.core.errors import InvalidConfigError, InvalidInputError, SchemaError

NULL_KEY = "__null__"
EMPTY_KEY = "__empty__"
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

# Characters Hudi's PartitionPathEncodeUtils escapes (Hive's FileUtils.escapePathName set).
_ESCAPED = {chr(c) for c in range(1, 0x20)} | set("\"#%'*/:=?\\\x7f{[]^")

# Java SimpleDateFormat letters -> strftime
_JAVA_TO_STRFTIME = [
    ("yyyy", "%Y"),
    ("yy", "%y"),
    ("MM", "%m"),
    ("dd", "%d"),
    ("HH", "%H"),
    ("hh", "%I"),
    ("mm", "%M"),
    ("ss", "%S"),
    ("SSS", "%f"),
    ("a", "%p"),
]


def java_date_format_to_strftime(fmt: str) -> str:
    out = []
    i = 0
    while i < len(fmt):
        if fmt[i] == "'":
            j = fmt.index("'", i + 1) if "'" in fmt[i + 1 :] else len(fmt)
            out.append(fmt[i + 1 : j].replace("%", "%%"))
            i = j + 1
            continue
        for java, py in _JAVA_TO_STRFTIME:
            if fmt.startswith(java, i):
                out.append(py)
                i += len(java)
                break
        else:
            if fmt[i].isalpha():
                raise InvalidConfigError(f"unsupported date format letter {fmt[i]!r} in {fmt!r}")
            out.append(fmt[i].replace("%", "%%"))
            i += 1
    return "".join(out)


def escape_partition_value(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


_NEEDS_ESCAPE = "[" + "".join(f"\\x{{{ord(c):02x}}}" for c in sorted(_ESCAPED)) + "]"  # RE2 class


def _escape_partition_values(text: pa.ChunkedArray) -> pa.ChunkedArray:
    """:func:`escape_partition_value` of every value (no nulls); only values that hold a character
    to escape are rewritten one by one."""
    values = text.combine_chunks()
    needs = pc.match_substring_regex(values, _NEEDS_ESCAPE)
    if not pc.any(needs).as_py():
        return pa.chunked_array([values])
    flags = np.asarray(needs.to_numpy(zero_copy_only=False), dtype=bool)
    escaped = [escape_partition_value(v) for v in values.filter(needs).to_pylist()]
    nth = np.maximum(np.cumsum(flags) - 1, 0)  # row -> its rank among the rewritten values
    return pa.chunked_array([pc.if_else(needs, pa.array(escaped, pa.string()).take(nth), values)])


def unescape_partition_value(value: str) -> str:
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), value)


def _as_text(col: pa.ChunkedArray | pa.Array, name: str) -> pa.ChunkedArray:
    typ = col.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return col if isinstance(col, pa.ChunkedArray) else pa.chunked_array([col])
    if pa.types.is_dictionary(typ):
        return _as_text(pc.cast(col, typ.value_type), name)
    if pa.types.is_nested(typ) or pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        raise SchemaError(f"column {name!r} of type {typ} cannot be used as a record key or partition field")
    if pa.types.is_boolean(typ):
        return pc.if_else(col, "true", "false")
    return pc.cast(col, pa.string())


@dataclass(frozen=True)
class TimestampPartitioning:
    """Hudi's ``TimestampBasedKeyGenerator`` settings (``hoodie.keygen.timebased.*``)."""

    timestamp_type: str  # UNIX_TIMESTAMP | EPOCHMILLISECONDS | EPOCHMICROSECONDS | DATE_STRING | SCALAR
    output_format: str  # Java date pattern, e.g. yyyy/MM/dd
    input_format: str | None = None  # for DATE_STRING, a Java date pattern
    timezone: str = "UTC"

    def render(self, col: pa.ChunkedArray, name: str) -> list[str | None]:
        out_fmt = java_date_format_to_strftime(self.output_format)
        tz = dt.UTC if self.timezone.upper() in ("UTC", "GMT") else _zone(self.timezone)
        typ = col.type
        values: list[str | None] = []
        kind = self.timestamp_type.upper()
        if pa.types.is_timestamp(typ) or pa.types.is_date(typ):
            ts = pc.cast(col, pa.timestamp("us", tz="UTC")) if pa.types.is_date(typ) else col
            for v in ts.to_pylist():
                if v is None:
                    values.append(None)
                    continue
                moment = v if v.tzinfo else v.replace(tzinfo=dt.UTC)
                values.append(moment.astimezone(tz).strftime(out_fmt))
            return values
        if kind == "DATE_STRING":
            in_fmt = java_date_format_to_strftime(self.input_format or "yyyy-MM-dd HH:mm:ss")
            for v in _as_text(col, name).to_pylist():
                if v is None:
                    values.append(None)
                    continue
                try:
                    moment = dt.datetime.strptime(v, in_fmt).replace(tzinfo=tz)
                except ValueError:
                    raise InvalidInputError(
                        f"value {v!r} of {name!r} does not match date format {self.input_format!r}"
                    ) from None
                values.append(moment.strftime(out_fmt))
            return values
        divisor = {"UNIX_TIMESTAMP": 1, "EPOCHMILLISECONDS": 1_000, "EPOCHMICROSECONDS": 1_000_000}.get(kind)
        if divisor is None:
            raise InvalidConfigError(f"unsupported timestamp type {self.timestamp_type!r}")
        if not (pa.types.is_integer(typ) or pa.types.is_floating(typ)):
            raise SchemaError(f"timestamp partition field {name!r} must be numeric for {kind}, got {typ}")
        for v in col.to_pylist():
            if v is None:
                values.append(None)
                continue
            moment = dt.datetime.fromtimestamp(v / divisor, dt.UTC).astimezone(tz)
            values.append(moment.strftime(out_fmt))
        return values


def _zone(name: str) -> dt.tzinfo:
    from zoneinfo import ZoneInfo

    try:
        return ZoneInfo(name)
    except Exception as e:
        raise InvalidConfigError(f"unknown time zone {name!r}") from e


@dataclass(frozen=True)
class KeyGenerator:
    record_key_fields: tuple[str, ...]
    partition_fields: tuple[str, ...] = ()
    hive_style: bool = False
    url_encode: bool = False
    key_type: KeyGeneratorType = KeyGeneratorType.SIMPLE
    timestamp: TimestampPartitioning | None = field(default=None)

    @property
    def complex_keys(self) -> bool:
        return len(self.record_key_fields) > 1 or self.key_type is KeyGeneratorType.COMPLEX

    def record_keys(self, table: pa.Table) -> pa.ChunkedArray:
        if not self.record_key_fields:
            raise InvalidConfigError("the table has no record key fields")
        for f in self.record_key_fields:
            if f not in table.column_names:
                raise SchemaError(f"record key field {f!r} is missing from the input")
        if not self.complex_keys:
            name = self.record_key_fields[0]
            keys = _as_text(table.column(name), name)
            bad = pc.sum(pc.or_kleene(pc.is_null(keys), pc.equal(keys, ""))).as_py()
            if bad:
                raise InvalidInputError(f"record key field {name!r} is null or empty in {bad} record(s)")
            return keys
        parts = []
        all_null = None
        for name in self.record_key_fields:
            text = _as_text(table.column(name), name)
            is_null = pc.is_null(text)
            all_null = is_null if all_null is None else pc.and_(all_null, is_null)
            text = pc.if_else(pc.equal(text, ""), EMPTY_KEY, text)
            text = pc.fill_null(text, NULL_KEY)
            parts.append(pc.binary_join_element_wise(name, text, ":"))
        if all_null is not None and pc.any(all_null).as_py():
            fields = ",".join(self.record_key_fields)
            raise InvalidInputError(f"all record key fields ({fields}) are null in some record(s)")
        return pc.binary_join_element_wise(*parts, ",")

    def partition_paths(self, table: pa.Table) -> pa.ChunkedArray:
        n = table.num_rows
        if not self.partition_fields or self.key_type is KeyGeneratorType.NON_PARTITION:
            return pa.chunked_array([pa.repeat(pa.scalar("", pa.string()), n)])
        segments = []
        for name in self.partition_fields:
            if name not in table.column_names:
                raise SchemaError(f"partition field {name!r} is missing from the input")
            col = table.column(name)
            if self.timestamp is not None:
                text = pa.chunked_array([pa.array(self.timestamp.render(col, name), pa.string())])
            else:
                text = _as_text(col, name)
            text = pc.if_else(pc.equal(text, ""), DEFAULT_PARTITION, text)
            text = pc.fill_null(text, DEFAULT_PARTITION)
            if self.url_encode:
                text = _escape_partition_values(text)
            if self.hive_style:
                text = pc.binary_join_element_wise(f"{name}=", text, "")
            segments.append(text)
        if len(segments) == 1:
            return segments[0]
        return pc.binary_join_element_wise(*segments, "/")

    def partition_values(self, partition_path: str) -> dict[str, str | None]:
        """Partition field values encoded in a partition path (as text; None for the default)."""
        if not self.partition_fields or not partition_path:
            return {}
        parts = partition_path.split("/")
        out: dict[str, str | None] = {}
        for name, part in zip(self.partition_fields, parts, strict=False):
            value = part.split("=", 1)[1] if self.hive_style and "=" in part else part
            if self.url_encode:
                value = unescape_partition_value(value)
            out[name] = None if value == DEFAULT_PARTITION else value
        return out
