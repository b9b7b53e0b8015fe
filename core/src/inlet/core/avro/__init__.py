"""Apache Hudi's Avro schemas for timeline metadata (``org.apache.hudi.avro.model``).

The ``.avsc`` files are the writer schemas found in instant files written by Apache Hudi 1.x;
Inlet writes its own instant files with exactly these schemas so Hudi readers decode them.
"""

from __future__ import annotations

import functools
import io
import json
from importlib import resources
from typing import Any

import fastavro

from inlet.core.errors import CorruptFileError


@functools.cache
def schema(name: str) -> Any:
    text = resources.files(__package__).joinpath(f"{name}.avsc").read_text("utf-8")
    return fastavro.parse_schema(json.loads(text))


def encode(name: str, record: dict[str, Any]) -> bytes:
    """An Avro object container file with one record, as Hudi's ``TimelineMetadataUtils`` writes."""
    buf = io.BytesIO()
    fastavro.writer(buf, schema(name), [record], codec="null")
    return buf.getvalue()


def decode(data: bytes, what: str = "instant file") -> dict[str, Any]:
    try:
        records = list(fastavro.reader(io.BytesIO(data)))
    except Exception as e:  # fastavro raises several unrelated types on garbage
        raise CorruptFileError(f"cannot decode {what} as Avro: {e}") from e
    if not records:
        raise CorruptFileError(f"{what} holds no Avro record")
    rec = records[0]
    if not isinstance(rec, dict):
        raise CorruptFileError(f"{what} does not hold an Avro record")
    return rec


def encode_long(n: int) -> bytes:
    """An Avro ``int`` or ``long`` in Avro's binary encoding: zig-zag, then a base-128 varint
    (least significant group first)."""
    z = ((n << 1) ^ (n >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)
