"""``inlet cdc decode``: one JSON line per change, or ``inlet: error: <why>`` and exit 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from inlet.services.cli.main import main

DATA = Path(__file__).resolve().parents[4].parent / "shared" / "testdata" / "debezium"
INLET = Path(sys.executable).parent / "inlet"


def record(pred: Any, name: str = "real_schemas_true.jsonl") -> dict[str, Any]:
    for line in (DATA / name).read_text().splitlines():
        r = json.loads(line)
        if pred(r):
            return r  # type: ignore[no-any-return]
    raise AssertionError("no such record")


def payload(r: dict[str, Any]) -> dict[str, Any]:
    v = r["value"]
    return v.get("payload", v) if v else {}  # type: ignore[no-any-return]


def write(tmp_path: Path, r: dict[str, Any]) -> list[str]:
    args = []
    (tmp_path / "value.json").write_text(json.dumps(r["value"]))
    args += ["--value", str(tmp_path / "value.json")]
    if r["key"] is not None:
        (tmp_path / "key.json").write_text(json.dumps(r["key"]))
        args += ["--key", str(tmp_path / "key.json")]
    return args


def test_decode_prints_one_json_line_subprocess(tmp_path: Path) -> None:
    # the snapshot read of order 100: INSERT INTO orders VALUES (100, 1, 12.345, 'first')
    r = record(lambda r: r["topic"] == "dbserver1.public.orders" and payload(r).get("op") == "r")
    proc = subprocess.run(
        [str(INLET), "cdc", "decode", *write(tmp_path, r), "--topic", r["topic"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert set(doc) == {"op", "table", "key", "before", "after", "lsn", "tx_id", "source_ts_ms", "snapshot"}
    assert doc["op"] == "r" and doc["table"] == "dbserver1.public.orders" and doc["snapshot"] is True
    assert doc["key"] == {"order_id": 100}
    assert doc["before"] is None
    assert doc["after"] == {"order_id": 100, "customer_id": 1, "amount": "12.345", "note": "first"}
    assert doc["lsn"] > 0 and doc["tx_id"] > 0 and doc["source_ts_ms"] > 0


def test_decode_error_is_one_line_and_exit_1_subprocess(tmp_path: Path) -> None:
    (tmp_path / "v.json").write_text('{"schema": {"type": "struct"')
    proc = subprocess.run(
        [str(INLET), "cdc", "decode", "--value", str(tmp_path / "v.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("inlet: error: value is not JSON")


def test_decode_all_types_and_toast(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # UPDATE customers SET balance = 24.99 WHERE name = 'Anne' (bio unchanged, TOASTed)
    r = record(
        lambda r: payload(r).get("op") == "u" and payload(r)["after"]["bio"] == "__debezium_unavailable_value"
    )
    assert main(["cdc", "decode", *write(tmp_path, r)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["op"] == "u" and doc["table"] == "dbserver1.public.customers"  # table from the source block
    assert doc["after"] == {
        "id": 1,
        "name": "Anne",
        "balance": "24.99",
        "score": "123.45",
        "born": "1990-05-17",
        "created_at": "2018-06-20T15:13:16.945104",
        "updated_at": "2024-01-02T01:04:05.123400Z",
        "doc": '{"n": [1, 2], "vip": true}',
        "uid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "tags": ["x", "y z"],
        "photo": "AQL/",  # base64 of \x01\x02\xff
        "bio": {"unchanged": True},
    }


def test_decode_transaction_end_and_silent_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    end = record(lambda r: payload(r).get("status") == "END" and len(payload(r)["data_collections"]) == 2)
    assert main(["cdc", "decode", *write(tmp_path, end), "--topic", end["topic"]]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {(d["table"], d["table_event_count"], d["total_event_count"]) for d in lines} == {
        ("dbserver1.public.orders", 1, 2),
        ("dbserver1.public.customers", 1, 2),
    }
    assert all(d["status"] == "END" for d in lines)
    for pred in (
        lambda r: r["topic"].startswith("__debezium-heartbeat"),
        lambda r: payload(r).get("status") == "BEGIN",
        lambda r: r["topic"] == "dbserver1.message",
    ):
        r = record(pred)
        assert main(["cdc", "decode", *write(tmp_path, r), "--topic", r["topic"]]) == 0
        assert capsys.readouterr().out == ""


def test_decode_table_without_primary_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # INSERT INTO events_nopk VALUES ('x', 1)
    r = record(lambda r: r["topic"] == "dbserver1.public.events_nopk" and payload(r).get("op") == "c")
    assert main(["cdc", "decode", *write(tmp_path, r)]) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith("inlet: error: table dbserver1.public.events_nopk has no primary key")
        and err.count("\n") == 1
    )
    assert main(["cdc", "decode", *write(tmp_path, r), "--keyless", "whole_row"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["key"] == {} and doc["after"] == {"ev": "x", "n": 1}


def test_decode_truncate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = record(lambda r: payload(r).get("op") == "t")
    assert main(["cdc", "decode", *write(tmp_path, r)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["op"] == "t" and doc["table"] == "dbserver1.public.orders" and doc["key"] is None


def test_decode_wrong_type_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = record(lambda r: r["topic"] == "dbserver1.public.orders" and payload(r).get("op") == "r")
    r["value"]["payload"]["after"]["customer_id"] = "one"
    assert main(["cdc", "decode", *write(tmp_path, r)]) == 1
    assert capsys.readouterr().err == "inlet: error: column 'customer_id': expected int32, got 'one'\n"
    assert main(["cdc", "decode", "--value", str(tmp_path / "nope.json")]) == 1
    assert "cannot read the value file" in capsys.readouterr().err


def test_schemaless_without_database_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = record(lambda r: payload(r).get("op") == "r", "real_schemas_false.jsonl")
    assert main(["cdc", "decode", *write(tmp_path, r)]) == 1
    assert "no source catalog configured (--database-url)" in capsys.readouterr().err


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["cdc", "decode", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--value", "--key", "--value-format", "--schema-registry", "--topic", "--database-url"):
        assert flag in out
