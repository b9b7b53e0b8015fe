"""Debezium's TOAST placeholder and the old key of a primary-key change (``__debezium.oldkey``), issue #21.

The record is the real CREATE of the recorded primary-key change (``UPDATE customers SET id = 42
WHERE name = 'Bob'``, ../shared/testdata/debezium); the recording kept no headers, so the header is
the one Kafka Connect's default ``SimpleHeaderConverter`` writes for it, ``{"id":2}`` (seen on the
live connector: tests/integration/writer/test_toast_live.py). Composite and text keys are Connect's
``Values`` text as its ``append`` writes structs: quoted names, strings escaping only ``\\`` and
``"``, numbers as Java prints them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from test_cdc_types import envelope

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer import Decoder, connect_values

DATA = Path(__file__).resolve().parents[4].parent / "shared" / "testdata" / "debezium"
PH = "__debezium_unavailable_value"


def _plain(v: pb.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "list_value":
        return [_plain(x) for x in v.list_value.values]
    return getattr(v, kind) if kind else None


def _bob_moved() -> tuple[str, bytes, bytes]:
    for line in (DATA / "real_schemas_true.jsonl").read_text().splitlines():
        r = json.loads(line)
        payload = (r["value"] or {}).get("payload") or {}
        if payload.get("op") == "c" and (payload.get("after") or {}).get("id") == 42:
            return r["topic"], json.dumps(r["key"]).encode(), json.dumps(r["value"]).encode()
    raise AssertionError("the recorded primary-key change is missing")


def test_the_create_of_a_primary_key_change_carries_the_old_key() -> None:
    topic, key, value = _bob_moved()
    (rec,) = Decoder().decode(topic, 0, 15, key, value, [("__debezium.oldkey", b'{"id":2}')])
    assert rec.change.op == pb.OPERATION_CREATE and rec.change.record_key == "42"
    assert [v.int_value for v in rec.change.old_key.values] == [2]
    # JsonConverter as the header converter: JSON with its schema
    json_header = b'{"schema":{"type":"struct","fields":[{"type":"int32","field":"id"}]},"payload":{"id":2}}'
    (rec,) = Decoder().decode(topic, 0, 15, key, value, [("__debezium.oldkey", json_header)])
    assert [v.int_value for v in rec.change.old_key.values] == [2]
    (plain,) = Decoder().decode(topic, 0, 15, key, value, [("__debezium.context.taskId", b"0")])
    assert not plain.change.old_key.values


def test_an_unreadable_old_key_keeps_the_change_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    topic, key, value = _bob_moved()
    with caplog.at_level(logging.WARNING, "inlet.cdc_consumer.decode"):
        (rec,) = Decoder().decode(topic, 0, 15, key, value, [("__debezium.oldkey", b'{"id":"two"}')])
    assert rec.change.record_key == "42" and not rec.change.old_key.values
    assert "cannot read the old key" in caplog.text and "not carried over to the new key 42" in caplog.text


def test_connect_values_text() -> None:
    assert connect_values.parse('{"id":2}') == {"id": 2}
    assert connect_values.parse('{"a":"x\\"y\\\\z, }","b":-7,"c":null,"d":true}') == {
        "a": 'x"y\\z, }',
        "b": -7,
        "c": None,
        "d": True,
    }
    assert connect_values.parse('{"n":1.50,"e":1E-7,"raw":"line\nbreak"}') == {
        "n": Decimal("1.50"),
        "e": Decimal("1E-7"),
        "raw": "line\nbreak",
    }
    assert connect_values.parse('{"v":{"scale":2,"value":"MDk="},"l":[1,"a"]}') == {
        "v": {"scale": 2, "value": "MDk="},
        "l": [1, "a"],
    }
    for bad in ('{"id":2', '{"id":"x}', '{"id":2} tail', '{"a":"\\n"}'):
        with pytest.raises(ValueError):
            connect_values.parse(bad)


def test_the_placeholder_is_a_real_value_in_an_insert_or_a_snapshot_read() -> None:
    """PostgreSQL leaves an unchanged TOASTed value out only of an UPDATE's new row (and Debezium
    of a primary-key change's new key): in an insert or a snapshot read, a value equal to one of
    Debezium's placeholder forms is the row's value, in every type Debezium has a placeholder for."""
    fields = [
        {"type": "string", "optional": True, "field": "note"},
        {"type": "bytes", "optional": True, "field": "blob"},
        {"type": "string", "optional": True, "name": "io.debezium.data.Json", "field": "doc"},
        {"type": "string", "optional": True, "name": "io.debezium.data.Uuid", "field": "uid"},
        {"type": "array", "optional": True, "items": {"type": "string"}, "field": "tags"},
        {"type": "array", "optional": True, "items": {"type": "int32"}, "field": "nums"},
    ]
    ph_uuid = str(uuid.UUID(bytes=hashlib.md5(PH.encode()).digest(), version=3))
    after = {
        "id": 1,
        "note": PH,
        "blob": base64.b64encode(PH.encode()).decode(),
        "doc": PH,
        "uid": ph_uuid,
        "tags": [PH],
        "nums": list(PH.encode()),
    }
    literal = [PH, PH.encode(), PH, ph_uuid, [PH], list(PH.encode())]
    for op, header, unchanged in (
        ("c", None, False),
        ("r", None, False),
        ("u", None, True),
        ("c", b'{"id":7}', True),  # the new key of a primary-key change
    ):
        key, value = envelope(fields, after, op=op)
        headers = [("__debezium.oldkey", header)] if header else None
        (rec,) = Decoder().decode("srv.public.t", 0, 0, key, value, headers)
        values = list(rec.change.after.values)[1:]
        if unchanged:
            assert [v.WhichOneof("kind") for v in values] == ["unchanged"] * 6, (op, header)
        else:
            assert [_plain(v) for v in values] == literal, op
