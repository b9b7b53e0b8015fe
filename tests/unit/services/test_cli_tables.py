"""``inlet tables --lake URI``: every replicated table of a lake with its last commit and freshness
(from the table's timeline), and what it cannot know without a running writer; bad input is one
line. (``--dir`` with a running stack's writer -- state, lag, error -- is shown in
tests/e2e/replication/test_stack_cli.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

from inlet.core import HudiTable
from inlet.services.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_tables_of_a_lake_with_freshness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INLET_STACK_DIR", raising=False)
    lake = tmp_path / "lake"
    orders = str(lake / "shop" / "public" / "orders")
    HudiTable.create(orders, name="orders", record_key="id")
    before = time.time()
    for v in (1, 2):
        HudiTable.open(orders).write(pa.table({"id": [1, v], "v": [v, v]}), "upsert")
    after = time.time()
    HudiTable.create(str(lake / "shop" / "audit" / "events"), name="events", record_key="id")
    (lake / "shop" / "public" / "not_a_table").mkdir()

    code, out, err = run(capsys, "tables", "--lake", str(lake), "--json")
    assert code == 0, err
    rows = {r["table"]: r for r in map(json.loads, out.splitlines())}
    assert sorted(rows) == ["shop.audit.events", "shop.public.orders"]
    last = HudiTable.open(orders).instants()[-1]
    o = rows["shop.public.orders"]
    assert o["path"] == orders and o["last_instant"] == last.time and o["pending"] == 0
    # freshness: the age of the last commit's completion, no older than this test's writes
    assert 0 <= o["freshness_s"] <= time.time() - before + 1 and o["freshness_s"] >= 0
    assert o["last_commit"][:16] <= time.strftime("%Y-%m-%dT%H:%M", time.gmtime(after + 60))
    assert (o["state"], o["lag"], o["error"]) == ("unknown", None, None)  # no writer to ask
    e = rows["shop.audit.events"]
    assert (e["last_instant"], e["last_commit"], e["freshness_s"]) == (None, None, None)

    code, out, err = run(capsys, "tables", "--lake", str(lake))
    assert code == 0, err
    header, _, *lines = out.splitlines()
    assert header.split() == ["table", "state", "last_commit", "freshness_s", "lag", "pending", "error"]
    assert [line.split()[0] for line in lines] == ["shop.audit.events", "shop.public.orders"]


def test_tables_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.delenv("INLET_STACK_DIR", raising=False)
    code, _, err = run(capsys, "tables", "--lake", str(tmp_path / "nowhere"))
    assert code == 2 and err.strip().splitlines() == [
        f"inlet: error: --lake {tmp_path / 'nowhere'}: no such directory"
    ]
    code, _, err = run(capsys, "tables", "--dir", str(tmp_path))
    assert code == 1 and len(err.strip().splitlines()) == 1 and f"no stack in {tmp_path}" in err
    code, _, err = run(capsys, "tables")
    assert code == 2 and "--dir STACK_DIR" in err and len(err.strip().splitlines()) == 1
