"""The main job, end to end: PostgreSQL changes replicated into Hudi tables, then proven equal.

    python -m inlet.services.demo [--dir DIR] [--keep] [--engine local|spark] [--lake local|s3|s3://B/P] [--s3-endpoint URL]

Brings the local stack up (``inlet stack up``: PostgreSQL, Debezium, Kafka, the CDC consumer, the
writer and the commit coordinator as real processes), creates a small shop schema in PostgreSQL
(customers with a TOASTed ``bio``, orders with a numeric amount and a timestamp, order lines with a
two-column key), runs a workload of inserts, updates, deletes, one large transaction and an
``ALTER TABLE ADD COLUMN``, shows the lake catching up, and then proves it: every replicated table
read back with Inlet and with the independent ``hudi`` reader (hudi-rs) equals PostgreSQL row for
row. A Kafka subscriber shows the commit events; then the stack goes down. Exits 1 if any check fails.

``--lake s3`` (``make demo-s3``) puts the lake into the bucket ``lake`` of the stack's own SeaweedFS
(``inlet stack up --lake s3``) and runs the same checks there, reading the tables over S3 with the
endpoint and credentials the stack reports; ``--lake s3://BUCKET/PREFIX`` uses an external store
(its credentials from the usual ``AWS_*`` environment or profile, its endpoint from ``--s3-endpoint``
or ``AWS_ENDPOINT_URL_S3``; the ``--s3-*`` flags go on to ``inlet stack up``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa

from inlet.core import HudiTable
from inlet.core.errors import InletError
from inlet.core.s3 import S3Options, is_s3_uri
from inlet.services.cli.s3_options import add_s3_options, apply_s3_options

TABLES = ("customers", "orders", "order_lines")
SCHEMA_SQL = """
CREATE TABLE customers (
    id          serial PRIMARY KEY,
    name        text NOT NULL,
    email       text,
    bio         text,
    balance     numeric(12,2) NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE customers ALTER COLUMN bio SET STORAGE EXTERNAL;  -- long bios live in TOAST
CREATE TABLE orders (
    id          bigserial PRIMARY KEY,
    customer_id int NOT NULL,
    amount      numeric(10,2) NOT NULL,
    status      text NOT NULL,
    placed_at   timestamp NOT NULL
);
CREATE TABLE order_lines (
    order_id    bigint NOT NULL,
    line        int NOT NULL,
    sku         text NOT NULL,
    qty         int NOT NULL,
    PRIMARY KEY (order_id, line)
);
"""
META_PREFIXES = ("_hoodie_", "_event_", "_change_", "_upstream_")


class DemoFailed(Exception):
    """What the demo proved did not hold."""


def _say(text: str = "") -> None:
    print(text, flush=True)


def _heading(step: str, text: str) -> None:
    _say()
    _say(f"== {step}. {text}")


def _inlet(*args: str, timeout: float = 600) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "inlet.services.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=None,  # progress lines go straight to the user
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise DemoFailed(f"'inlet {' '.join(args)}' failed with exit status {proc.returncode}")
    return proc.stdout


# -- the workload ---------------------------------------------------------------------------------


def _bio(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghij klmnopqrstuvwxyz") for _ in range(rng.randint(3000, 6000)))


def load_initial(url: str, scale: int, rng: random.Random) -> None:
    """The schema, then customers (every fourth with a long, TOASTed bio), orders and their lines."""
    with psycopg.connect(url, autocommit=False) as conn:
        conn.execute(SCHEMA_SQL)
        conn.commit()
        _say("   created tables customers, orders, order_lines")
        for i in range(scale):
            conn.execute(
                "INSERT INTO customers (name, email, bio, balance) VALUES (%s, %s, %s, %s)",
                (f"customer {i}", f"c{i}@example.com", _bio(rng) if i % 4 == 0 else None, Decimal(i) / 4),
            )
            if i % 50 == 49:
                conn.commit()
        conn.commit()
        base = dt.datetime(2026, 1, 1)
        for o in range(1, scale * 4 + 1):
            conn.execute(
                "INSERT INTO orders (customer_id, amount, status, placed_at) VALUES (%s, %s, 'new', %s)",
                (
                    rng.randint(1, scale),
                    Decimal(rng.randint(100, 99_999)) / 100,
                    base + dt.timedelta(minutes=o),
                ),
            )
            for line in range(1, rng.randint(1, 3) + 1):
                conn.execute(
                    "INSERT INTO order_lines VALUES (%s, %s, %s, %s)",
                    (o, line, f"sku-{rng.randint(1, 99)}", line),
                )
            if o % 100 == 0:
                conn.commit()
        conn.commit()
        _say(f"   inserted {scale} customers and {scale * 4} orders with their lines")


def change_everything(url: str, scale: int) -> None:
    """Updates (some keep their TOASTed bio), deletes, one large transaction and a new column."""
    with psycopg.connect(url, autocommit=False) as conn:
        conn.execute("UPDATE orders SET status = 'paid' WHERE id % 3 = 0")
        conn.execute("UPDATE customers SET name = name || ' (vip)' WHERE id % 4 = 1")  # bio unchanged
        conn.commit()
        _say("   updated order statuses, renamed customers (their TOASTed bios unchanged)")
        conn.execute("DELETE FROM order_lines WHERE order_id % 10 = 7")
        conn.execute("DELETE FROM orders WHERE id % 10 = 7")
        conn.execute("INSERT INTO customers (name) VALUES ('short-lived')")
        conn.execute("DELETE FROM customers WHERE name = 'short-lived'")
        conn.commit()
        _say("   deleted a tenth of the orders with their lines, and a customer inserted and deleted at once")
        n = conn.execute(
            "UPDATE orders SET amount = amount + 1, status = 'shipped' WHERE status = 'paid'"
        ).rowcount
        conn.execute("UPDATE customers SET balance = balance + 10")
        conn.commit()
        _say(f"   one transaction updated {n} orders and every customer's balance")
        conn.execute("ALTER TABLE customers ADD COLUMN tier text")
        conn.execute(
            "UPDATE customers SET tier = CASE WHEN id %% 2 = 0 THEN 'gold' ELSE 'silver' END WHERE id <= %s",
            (scale // 2,),
        )
        conn.execute("INSERT INTO customers (name, tier) VALUES ('newcomer', 'bronze')")
        conn.commit()
        _say("   added column customers.tier and filled it for half the customers")


# -- reading both sides ---------------------------------------------------------------------------


def _norm(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)  # a timestamp without time zone lands as UTC wall clock
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC)
    return value


def postgres_rows(url: str, table: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    with psycopg.connect(url) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        cur = conn.execute(f"SELECT * FROM {table}")
        cols = [d.name for d in cur.description or ()]
        keys = _key_columns(conn, table)
        out = {}
        for row in cur.fetchall():
            rec = {c: _norm(v) for c, v in zip(cols, row, strict=True)}
            out[tuple(rec[k] for k in keys)] = rec
        return out


def _key_columns(conn: psycopg.Connection[Any], table: str) -> list[str]:
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary "
        "ORDER BY array_position(i.indkey, a.attnum)",
        (table,),
    ).fetchall()
    return [r[0] for r in rows]


def _rows_by_key(
    data: pa.Table, columns: Sequence[str], keys: Sequence[str]
) -> dict[tuple[Any, ...], dict[str, Any]]:
    present = [c for c in columns if c in data.column_names]
    out = {}
    for rec in data.select(present).to_pylist():
        full = {c: _norm(rec.get(c)) for c in columns}
        out[tuple(full[k] for k in keys)] = full
    return out


def table_uri(lake: str, database: str, table: str) -> str:
    """Where the stack's writer puts a replicated table: ``<lake>/<db>/public/<table>`` (a directory
    or an s3:// URI)."""
    return f"{lake.rstrip('/')}/{database}/public/{table}"


def lake_s3_env(addresses: dict[str, Any]) -> dict[str, str]:
    """The AWS_* settings that reach a ``--lake s3`` stack's bucket (its SeaweedFS reports them under
    ``s3``); empty for a local lake or an external one (whose settings are already in the environment)."""
    s3 = addresses.get("s3") or {}
    if "access_key" not in s3:
        return {}
    return S3Options(
        endpoint=s3["endpoint"],
        region=s3.get("region"),
        access_key=s3["access_key"],
        secret_key=s3["secret_key"],
        path_style=True,
    ).to_env()


def inlet_rows(
    uri: str, columns: Sequence[str], keys: Sequence[str]
) -> dict[tuple[Any, ...], dict[str, Any]]:
    return _rows_by_key(HudiTable.open(uri).read(), columns, keys)


def hudi_rs_rows(
    uri: str, columns: Sequence[str], keys: Sequence[str], reader_version: str
) -> dict[tuple[Any, ...], dict[str, Any]]:
    from hudi import HudiReadOptions, HudiTableBuilder

    builder = HudiTableBuilder.from_base_uri(uri).with_hudi_option(
        "hoodie.read.file.group.reader.version", reader_version
    )
    if is_s3_uri(uri):  # hudi-rs reads S3 with the same endpoint and credentials, as storage options
        builder = builder.with_storage_options(S3Options.from_env().hudi_rs_options())
    table = builder.build()
    batches = table.read(HudiReadOptions())
    if not batches:
        return {}
    data = pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")
    return _rows_by_key(data, columns, keys)


def _diff(expected: dict[Any, Any], actual: dict[Any, Any]) -> str:
    missing = [k for k in expected if k not in actual]
    extra = [k for k in actual if k not in expected]
    wrong = [k for k in expected if k in actual and expected[k] != actual[k]]
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing (e.g. {missing[0]})")
    if extra:
        parts.append(f"{len(extra)} extra (e.g. {extra[0]})")
    if wrong:
        k = wrong[0]
        cols = [c for c in expected[k] if expected[k][c] != actual[k].get(c)]
        parts.append(
            f"{len(wrong)} differ (e.g. key {k}: {cols[0]} {expected[k][cols[0]]!r} != {actual[k].get(cols[0])!r})"
        )
    return "; ".join(parts) or "equal"


# -- the tour -------------------------------------------------------------------------------------


def wait_for_lake(url: str, lake: str, database: str, timeout_s: float) -> float:
    """Poll until every table in the lake equals PostgreSQL; returns the seconds it took."""
    start = time.monotonic()
    last_report = 0.0
    while True:
        states = []
        done = True
        for table in TABLES:
            expected = postgres_rows(url, table)
            got: dict[Any, Any] = {}
            cols = list(next(iter(expected.values())).keys()) if expected else []
            with psycopg.connect(url) as conn:
                keys = _key_columns(conn, table)
            try:
                got = inlet_rows(table_uri(lake, database, table), cols, keys)
            except Exception:  # not created yet, or mid-creation
                got = {}
            equal = got == expected
            done = done and equal
            states.append(f"{table} {len(got)}/{len(expected)}{'' if equal else '*'}")
        elapsed = time.monotonic() - start
        if done:
            return elapsed
        if elapsed - last_report >= 3:
            _say(f"   lake after {elapsed:4.0f} s: " + ", ".join(states) + "   (* = not yet equal)")
            last_report = elapsed
        if elapsed > timeout_s:
            raise DemoFailed(
                f"the lake did not catch up with PostgreSQL in {timeout_s:.0f} s: {', '.join(states)}"
            )
        time.sleep(1.0)


def compact(coordinator: str, table_id: str, uri: str) -> str | None:
    """Compact a table now, committing through the coordinator as every writer does."""
    from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol

    with CoordinatorClient(coordinator) as client:
        storage = HudiTable.open(uri).storage
        table = HudiTable.open(uri, commit_protocol=GrpcCommitProtocol(client, table_id, storage))
        instant = table.schedule_compaction({"hoodie.compact.inline.max.delta.commits": "1"})
        if instant is not None:
            table.run_compaction(instant)
        return instant


def prove(url: str, lake: str, database: str, coordinator: str) -> None:
    """Inlet's snapshot read, then (after a compaction) both hudi-rs file-group readers, against PostgreSQL.

    hudi-rs 0.5.0 cannot merge these tables' Merge-on-Read log files on its own: its reader 1 fails on
    any table with Debezium's partial-update (TOAST) setting, and its reader 2 refuses a placeholder
    whose earlier value sits in a log written before a column was added. After a compaction the
    file slices are base files, which both read.
    """
    _say(f"   {'table':<12} {'postgres':>9} {'inlet':>9} {'hudi-rs 1':>9} {'hudi-rs 2':>9}  result")
    failures = []
    for table in TABLES:
        expected = postgres_rows(url, table)
        cols = list(next(iter(expected.values())).keys())
        with psycopg.connect(url) as conn:
            keys = _key_columns(conn, table)
        path = table_uri(lake, database, table)
        ours = inlet_rows(path, cols, keys)
        compact(coordinator, f"{database}.public.{table}", path)
        theirs = [hudi_rs_rows(path, cols, keys, version) for version in ("1", "2")]
        equal = ours == expected and all(t == expected for t in theirs)
        _say(
            f"   {table:<12} {len(expected):>9} {len(ours):>9} {len(theirs[0]):>9} {len(theirs[1]):>9}  "
            + ("equal" if equal else "DIFFERENT")
        )
        if ours != expected:
            failures.append(f"{table} (inlet): {_diff(expected, ours)}")
        for version, rows in zip(("1", "2"), theirs, strict=True):
            if rows != expected:
                failures.append(f"{table} (hudi-rs reader {version}): {_diff(expected, rows)}")
    if failures:
        raise DemoFailed("; ".join(failures))


def show_commit_events(bootstrap: str) -> None:
    from confluent_kafka import Consumer

    from inlet.proto.events.v1 import events_pb2

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"inlet-demo-{time.time_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.subscribe(["inlet.commits"])
    events = []
    deadline = time.monotonic() + 20
    idle_since = time.monotonic()
    try:
        while time.monotonic() < deadline and time.monotonic() - idle_since < 4:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            idle_since = time.monotonic()
            ev = events_pb2.CommitEvent()
            ev.ParseFromString(msg.value() or b"")
            events.append(ev)
    finally:
        consumer.close()
    per_table: dict[str, int] = {}
    for ev in events:
        per_table[ev.table_id] = per_table.get(ev.table_id, 0) + 1
    _say(
        f"   {len(events)} commit events on inlet.commits: "
        + ", ".join(f"{t} {n}" for t, n in sorted(per_table.items()))
    )
    for ev in events[-5:]:
        _say(
            f"   {ev.table_id:<24} {ev.instant.instant_time} {ev.instant.action:<12} "
            f"+{ev.num_inserts} ~{ev.num_updates} -{ev.num_deletes}"
        )
    if not events:
        raise DemoFailed("no commit event reached inlet.commits")


def show_catalog(uri: str, database: str, timeout_s: float = 60) -> None:
    """The Hive Metastore's tables, as catalog sync registered them (HiveSyncTool's names)."""
    from inlet.services.catalog_sync import MetastoreClient

    hive_db = f"{database}_public"
    wanted = {f"{t}{suffix}" for t in TABLES for suffix in ("", "_ro", "_rt")}
    deadline = time.monotonic() + timeout_s
    names: set[str] = set()
    while time.monotonic() < deadline:
        with MetastoreClient(uri) as client:  # its get_table works on Hive 4 too (get_table_req)
            if hive_db in client.call("get_all_databases"):
                names = set(client.call("get_all_tables", hive_db))
                if wanted <= names:
                    for name in sorted(names):
                        table = client.get_table(hive_db, name)
                        fmt = table.sd.inputFormat.rsplit(".", 1)[-1]
                        _say(
                            f"   {hive_db}.{name:<16} {len(table.sd.cols):>3} columns  {fmt}  {table.sd.location}"
                        )
                    return
        time.sleep(1)
    raise DemoFailed(f"catalog sync registered {sorted(names)} in {hive_db}, expected {sorted(wanted)}")


def run(
    directory: Path, engine: str, scale: int, lake_option: str = "local", s3_flags: Sequence[str] = ()
) -> None:
    rng = random.Random(7)
    _heading(
        "1",
        f"Starting the stack in {directory} (PostgreSQL, Kafka, Debezium, coordinator, CDC consumer, writer)",
    )
    up = ["stack", "up", "--dir", str(directory), "--engine", engine, "--lake", lake_option, *s3_flags]
    addresses = json.loads(_inlet(*up).strip().splitlines()[-1])
    url = addresses["postgres"]["url"]
    lake = addresses["lake"]
    database = url.rsplit("/", 1)[1]
    # this process reads the lake too: with the S3 endpoint and credentials the stack reports
    os.environ.update(lake_s3_env(addresses))
    _say(f"   postgres {url}")
    _say(
        f"   kafka    {addresses['kafka']['bootstrap']}, coordinator {addresses['coordinator']['address']}, lake {lake}"
    )
    if is_s3_uri(lake):
        # the stack's own SeaweedFS (under s3) holds the lake only with --lake s3; else the broker's topics
        own = (addresses.get("s3") or {}) if lake_option == "s3" else {}
        endpoint = own.get("endpoint") or S3Options.from_env().endpoint or "AWS"
        _say(f"   the lake is on S3 ({endpoint}): every table is written and read over S3 requests")
    try:
        _heading("2", "Loading PostgreSQL; the lake follows (new tables are found, created and filled)")
        load_initial(url, scale, rng)
        took = wait_for_lake(url, lake, database, timeout_s=300)
        _say(
            f"   every table equals PostgreSQL {took:.1f} s after the last commit (including table discovery)"
        )

        _heading("3", "Updates, deletes, a large transaction and a new column; the lake catches up")
        change_everything(url, scale)
        took = wait_for_lake(url, lake, database, timeout_s=300)
        _say(f"   every table equals PostgreSQL {took:.1f} s after the last commit")

        _heading(
            "4", "Proof: PostgreSQL, Inlet (snapshot) and hudi-rs (readers 1 and 2, after a compaction) agree"
        )
        prove(url, lake, database, addresses["coordinator"]["address"])

        _heading("5", "Commit events a Kafka subscriber sees")
        show_commit_events(addresses["kafka"]["bootstrap"])

        if "metastore" in addresses:
            _heading(
                "6", "The Hive Metastore, kept in step by catalog sync (Merge-on-Read: <t>, <t>_ro, <t>_rt)"
            )
            show_catalog(addresses["metastore"]["uri"], database)
    finally:
        _heading("7", "Stopping the stack")
        _inlet("stack", "down", "--dir", str(directory), timeout=300)
        _say("   stopped")


def _lake(value: str) -> str:
    from inlet.services.cli.errors import UsageError
    from inlet.services.cli.stack import check_lake

    try:
        check_lake(value)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--lake ")) from None
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inlet.services.demo",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument(
        "--dir", type=Path, help="stack directory (default: a temporary one, removed afterwards)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary stack directory")
    parser.add_argument("--engine", choices=("local", "spark"), default="local", help="the writer's engine")
    parser.add_argument("--scale", type=int, default=200, help="customers to insert (orders: 4x)")
    parser.add_argument(
        "--lake",
        type=_lake,
        default="local",
        help="where the tables go: local (DIR/lake), s3 (the stack's own SeaweedFS, bucket `lake`; "
        "what `make demo-s3` runs) or s3://BUCKET/PREFIX (an external store; endpoint and credentials "
        "from --s3-endpoint or AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, ...)",
    )
    add_s3_options(parser)
    args = parser.parse_args(argv)
    try:
        apply_s3_options(args)  # this process reads the lake too
    except InletError as e:
        parser.error(str(e))
    s3_flags = [
        *(["--s3-endpoint", args.s3_endpoint] if args.s3_endpoint else []),
        *(["--s3-region", args.s3_region] if args.s3_region else []),
        *(
            []
            if args.s3_path_style is None
            else ["--s3-path-style" if args.s3_path_style else "--no-s3-path-style"]
        ),
    ]
    directory = args.dir or Path(tempfile.mkdtemp(prefix="inlet-demo-"))
    try:
        run(directory.resolve(), args.engine, args.scale, args.lake, s3_flags)
    except (DemoFailed, InletError, psycopg.Error, OSError, subprocess.TimeoutExpired) as e:
        print(f"demo: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if args.dir is None and not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    _say()
    _say("Done: every change made in PostgreSQL is in the lake, once.")
    if args.dir is not None or args.keep:
        _say(
            f"The stack's data and logs stay in {directory} ('inlet stack up --dir {directory}' resumes it)."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
