"""The compiled Avro readers (:mod:`inlet.services.cdc_consumer.avro_reader`) read exactly what fastavro reads.

Both readers get the same bytes: the recorded Confluent Avro events of ``shared/testdata/debezium``
(values and keys, every schema of the recording), and random data of a schema with every Avro type
written by fastavro; a body cut short or with a byte flipped fails in the compiled reader whenever
it fails in fastavro's (and reads the same datum otherwise).
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

import fastavro
import pytest

from inlet.services.cdc_consumer import avro
from inlet.services.cdc_consumer.avro_reader import compile_reader

TESTDATA = Path(__file__).resolve().parents[4].parent / "shared" / "testdata" / "debezium"
if not TESTDATA.is_dir():
    TESTDATA = Path("/work/shared/testdata/debezium")

EVERY_TYPE: dict[str, Any] = {
    "type": "record",
    "name": "Every",
    "namespace": "t.ns",
    "fields": [
        {"name": "n", "type": "null"},
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": "string"},
        {"name": "y", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "x", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "a", "type": {"type": "array", "items": ["null", "long"]}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
        {
            "name": "u",
            "type": [
                "null",
                "string",
                "Color",
                {
                    "type": "record",
                    "name": "In",
                    "fields": [{"name": "v", "type": "bytes"}, {"name": "c", "type": "t.ns.Color"}],
                },
            ],
        },
        {"name": "r", "type": ["null", "In"]},
        {"name": "p", "type": {"type": "int", "connect.type": "int16"}},
        {"name": "nested", "type": {"type": "array", "items": {"type": "map", "values": ["null", "Four"]}}},
    ],
}


def _random(rnd: random.Random) -> dict[str, Any]:
    def text() -> str:
        return "".join(rnd.choice("aé€😀\x00z") for _ in range(rnd.choice((0, 1, 5, 70, 200))))

    def big() -> int:
        return rnd.choice(
            (
                0,
                1,
                -1,
                63,
                64,
                -64,
                -65,
                2**31 - 1,
                -(2**31),
                2**63 - 1,
                -(2**63),
                rnd.randint(-(2**63), 2**63 - 1),
            )
        )

    color = rnd.choice(["RED", "GREEN", "BLUE"])
    return {
        "n": None,
        "b": rnd.random() < 0.5,
        "i": rnd.choice((0, -1, 2**31 - 1, -(2**31), rnd.randint(-1000, 1000))),
        "l": big(),
        "f": rnd.choice((0.0, 1.5, -3.25e10, float("inf"))),
        "d": rnd.choice((0.0, 1e-300, -2.5, float("-inf"), rnd.random())),
        "s": text(),
        "y": rnd.randbytes(rnd.choice((0, 1, 130))),
        "e": color,
        "x": rnd.randbytes(4),
        "a": [rnd.choice((None, big())) for _ in range(rnd.choice((0, 1, 3, 100)))],
        "m": {text(): text() for _ in range(rnd.choice((0, 2, 70)))},
        "u": rnd.choice((None, text(), color, {"v": rnd.randbytes(3), "c": color})),
        "r": rnd.choice((None, {"v": b"", "c": "RED"})),
        "p": rnd.randint(-(2**15), 2**15 - 1),
        "nested": [{text(): rnd.choice((None, rnd.randbytes(4)))} for _ in range(rnd.choice((0, 2)))],
    }


def _fastavro(data: bytes, parsed: Any) -> tuple[Any, int] | type[BaseException]:
    buf = io.BytesIO(data)
    try:
        datum = fastavro.schemaless_reader(buf, parsed, None)
    except Exception as e:
        return type(e)
    return datum, buf.tell()


def _compiled(data: bytes, reader: Any) -> tuple[Any, int] | type[BaseException]:
    try:
        return reader(data)  # type: ignore[no-any-return]
    except Exception as e:
        return type(e)


def _same(data: bytes, schema: Any, parsed: Any, reader: Any) -> None:
    want, got = _fastavro(data, parsed), _compiled(data, reader)
    if got is ValueError and isinstance(want, tuple):
        # the one difference: a varint past 64 bits, which fastavro's C reader wraps around
        with pytest.raises(ValueError, match="past 64 bits"):
            reader(data)
        return
    if isinstance(want, tuple):
        assert repr(got) == repr(want), data.hex()  # repr: a flipped byte may make a NaN
    else:  # fastavro cannot read it: neither can the compiled reader (avro.read says DecodeError)
        assert not isinstance(got, tuple) or got[1] != len(data) or got == want, (want, got, data.hex())


def test_every_type_reads_as_fastavro_does() -> None:
    parsed = fastavro.parse_schema(EVERY_TYPE)
    reader = compile_reader(EVERY_TYPE)
    assert reader is not None
    rnd = random.Random(23)
    for _ in range(300):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, _random(rnd))
        data = buf.getvalue()
        datum, end = reader(data)
        assert (datum, end) == (fastavro.schemaless_reader(io.BytesIO(data), parsed, None), len(data))
        for cut in sorted({0, 1, len(data) // 2, len(data) - 1}):
            if cut < len(data):
                with pytest.raises(Exception):  # noqa: B017 - any error: avro.read names it
                    reader(data[:cut])
        flipped = bytearray(data)
        flipped[rnd.randrange(len(data))] ^= 0xFF
        _same(bytes(flipped), EVERY_TYPE, parsed, reader)


def _recorded() -> list[tuple[Any, bytes]]:
    subjects = json.loads((TESTDATA / "avro_registry_subjects.json").read_text())
    schemas = {v["id"]: v["schema"] for versions in subjects.values() for v in versions}
    out = []
    for line in (TESTDATA / "avro_records_hex.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for field in ("key_hex", "value_hex"):
            if rec.get(field):
                data = bytes.fromhex(rec[field])
                schema_id = int.from_bytes(data[1:5], "big")
                if data[0] == 0 and schema_id in schemas:
                    out.append((schemas[schema_id], data[5:]))
    return out


def test_recorded_debezium_events_read_as_fastavro_does() -> None:
    recorded = _recorded()
    assert len(recorded) >= 6 and len({json.dumps(s) for s, _ in recorded}) >= 2
    readers: dict[str, Any] = {}
    for schema, body in recorded:
        plain = avro._strip_logical(schema)
        key = json.dumps(plain)
        if key not in readers:
            readers[key] = (fastavro.parse_schema(plain), compile_reader(plain))
        parsed, reader = readers[key]
        assert reader is not None
        assert reader(body) == (fastavro.schemaless_reader(io.BytesIO(body), parsed, None), len(body))
        for cut in range(len(body)):  # every truncation fails
            with pytest.raises(Exception):  # noqa: B017
                reader(body[:cut])


def test_a_schema_it_cannot_compile_is_left_to_fastavro() -> None:
    assert (
        compile_reader({"type": "record", "name": "R", "fields": [{"name": "x", "type": "Nowhere"}]}) is None
    )


def test_a_union_of_more_than_63_branches() -> None:
    """Its index may take two varint bytes (the compiled reader compares one byte otherwise)."""
    branches = ["null", *({"type": "fixed", "name": f"F{k}", "size": 1} for k in range(70))]
    schema = {"type": "record", "name": "Wide", "fields": [{"name": "u", "type": branches}]}
    parsed = fastavro.parse_schema(schema)
    reader = compile_reader(schema)
    assert reader is not None
    for k in (0, 1, 63, 64, 70):
        data = bytes([k * 2]) if k < 64 else bytes([(k * 2) & 0x7F | 0x80, (k * 2) >> 7])
        _same(data + b"x", schema, parsed, reader)
        if k < 64:
            assert reader(data + b"x")[1] == len(data) + (k > 0)
