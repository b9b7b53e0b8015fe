"""``inlet write|compaction|rollback|savepoint|restore|archive --coordinator HOST:PORT --table-id ID``: CLI commits go through the
coordinator (its timeline, its conflict checks), and the flags are checked before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from inlet.core import HudiTable
from inlet.services.cli.main import main
from inlet.services.coordinator_client.client import CoordinatorClient


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def outbox_events(pg_url: str) -> list[str]:
    with psycopg.connect(pg_url) as conn:
        return [r[0] for r in conn.execute("SELECT event_id FROM outbox ORDER BY event_id").fetchall()]


def test_cli_write_compaction_and_rollback_commit_through_the_coordinator(
    coordinator, client: CoordinatorClient, pg_url: str, lake: Path, tmp_path: Path, capsys
) -> None:
    path = str(lake / "trips")
    assert run(capsys, "table", "create", path, "--name", "trips", "--record-key", "id", "--type", "mor",
               "--ordering-field", "ts")[0] == 0  # fmt: skip
    data = tmp_path / "rides.parquet"
    via = ("--coordinator", coordinator.address, "--table-id", "sales.trips")
    for ts in (1, 2):
        pq.write_table(pa.table({"id": [1, 2], "ts": [ts, ts], "fare": [ts * 1.5, ts * 2.5]}), data)
        code, out, err = run(capsys, "write", path, "--op", "upsert", "--input", str(data), *via)
        assert code == 0, err
    last = json.loads(out)["instant"]
    completed = [i.time for i in client.get_timeline("sales.trips")]
    assert last in completed and len(completed) == 2
    # each completion went through the coordinator's transaction: one outbox row (commit event) each
    assert outbox_events(pg_url) == [f"sales.trips/{t}" for t in completed]

    code, out, err = run(capsys, "compaction", "run", path, "--schedule", "--max-delta-commits", "1", *via)
    assert code == 0, err
    compaction = json.loads(out)["instant"]
    assert compaction in [i.time for i in client.get_timeline("sales.trips")]
    assert f"sales.trips/{compaction}" in outbox_events(pg_url)
    assert run(capsys, "rollback", path, *via)[0] == 0
    rows = HudiTable.open(path).read(columns=["id", "fare"]).sort_by("id").to_pylist()
    assert rows == [{"id": 1, "fare": 3.0}, {"id": 2, "fare": 5.0}]


def test_coordinator_flags_go_together_and_nothing_is_written_otherwise(
    coordinator, lake: Path, tmp_path: Path, capsys
) -> None:
    path = str(lake / "t")
    assert run(capsys, "table", "create", path, "--name", "t", "--record-key", "id")[0] == 0
    data = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [1]}), data)
    code, _, err = run(
        capsys, "write", path, "--op", "insert", "--input", str(data), "--coordinator", coordinator.address
    )
    assert code == 2 and "--coordinator needs --table-id" in err
    code, _, err = run(capsys, "write", path, "--op", "insert", "--input", str(data), "--table-id", "x.t")
    assert code == 2 and "--table-id needs --coordinator" in err
    code, _, err = run(capsys, "write", path, "--op", "insert", "--input", str(data), "--coordinator",
                       coordinator.address, "--table-id", "x.t", "--coordinator-ca", str(tmp_path / "no.pem"))  # fmt: skip
    assert code == 2 and "--coordinator-ca: cannot read" in err
    assert HudiTable.open(path).instants() == []


def test_cli_savepoint_restore_and_archive_go_through_the_coordinator(
    coordinator, client: CoordinatorClient, lake: Path, tmp_path: Path, capsys
) -> None:
    path = str(lake / "kept")
    assert run(capsys, "table", "create", path, "--name", "kept", "--record-key", "id")[0] == 0
    via = ("--coordinator", coordinator.address, "--table-id", "sales.kept")
    data = tmp_path / "in.parquet"
    instants = []
    for v in (1, 2):
        pq.write_table(pa.table({"id": [1], "v": [v]}), data)
        code, out, err = run(capsys, "write", path, "--op", "upsert", "--input", str(data), *via)
        assert code == 0, err
        instants.append(json.loads(out)["instant"])

    def actions() -> list[str]:
        return [i.action for i in client.get_timeline("sales.kept")]

    def savepoints() -> list[str]:
        return [s.instant for s in HudiTable.open(path).savepoints()]

    # a savepoint is written under the table's writers' lock at the coordinator: not while it is held
    lease = client.acquire_lock("sales.kept", "a-writer-elsewhere", lease_ms=30_000)
    try:
        code, _, err = run(capsys, "savepoint", "create", path, "--instant", instants[0], *via)
        assert code == 1 and len(err.strip().splitlines()) == 1 and "lock" in err, err
    finally:
        client.release_lock("sales.kept", lease.lock_id)
    assert savepoints() == []
    code, _, err = run(capsys, "savepoint", "create", path, "--instant", instants[0], *via)
    assert code == 0, err
    assert savepoints() == [instants[0]]
    # restore too (under the lock), and the coordinator's timeline (read from the table) shows it
    code, _, err = run(capsys, "restore", path, "--to", instants[0], *via)
    assert code == 0, err
    assert actions()[-1] == "restore"
    assert HudiTable.open(path).read(columns=["id", "v"]).to_pylist() == [{"id": 1, "v": 1}]
    code, _, err = run(capsys, "savepoint", "delete", path, "--instant", instants[0], *via)
    assert code == 0, err
    assert savepoints() == []

    # archive holds the table's services lock at the coordinator: not while table services hold it
    lease = client.acquire_lock(
        "sales.kept", "table-services-elsewhere", lease_ms=30_000, lock_name="services"
    )
    try:
        code, _, err = run(capsys, "archive", "run", path, *via)
        assert code == 1 and len(err.strip().splitlines()) == 1 and "lock" in err, err
    finally:
        client.release_lock("sales.kept", lease.lock_id)
    code, out, err = run(capsys, "archive", "run", path, *via)
    assert code == 0, err
    assert json.loads(out)["archived"] == []  # nothing old enough yet
