"""A guided tour of Inlet's table API: build a small Hudi table, change it, and read it back.

    python -m inlet.services.demo --library [--path DIR]

(Without ``--library`` the module runs the replication demo, :mod:`inlet.services.replication_demo`.)

Steps: create a Copy-on-Write table of taxi rides partitioned by city, insert 10 rides,
upsert three (one carrying an *older* event time, which must not win), insert one, delete one,
then show the timeline, the latest snapshot, a time-travel read as of the first commit and a
filtered, projected read. The demo checks its own results and exits 1 if one is wrong.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from inlet.core import CommitResult, HudiTable, InletError
from inlet.services import logs
from inlet.services.cli.render import format_table

BASE_TS = 1_714_550_400_000  # 2024-05-01T08:00:00Z, epoch milliseconds
DATA_COLUMNS = ["ride_id", "city", "rider", "fare", "ts"]
SHOWN_COLUMNS = ["ride_id", "city", "rider", "fare", "event_time"]


class DemoCheckFailed(Exception):
    """The table did not hold what the demo expected."""


def _rides(rows: Sequence[tuple[int, str, str, float, int]]) -> pa.Table:
    ids, cities, riders, fares, ts = zip(*rows, strict=True)
    return pa.table(
        {
            "ride_id": pa.array(ids, pa.int64()),
            "city": pa.array(cities, pa.string()),
            "rider": pa.array(riders, pa.string()),
            "fare": pa.array(fares, pa.float64()),
            "ts": pa.array([BASE_TS + t * 60_000 for t in ts], pa.int64()),
        }
    )


INITIAL = _rides(
    [
        (1, "san_francisco", "ana", 18.5, 0),
        (2, "san_francisco", "bo", 32.0, 1),
        (3, "new_york", "cy", 12.25, 2),
        (4, "new_york", "di", 45.0, 3),
        (5, "chicago", "ed", 22.75, 4),
        (6, "chicago", "fay", 9.5, 5),
        (7, "san_francisco", "gus", 27.0, 6),
        (8, "new_york", "hal", 15.0, 7),
        (9, "chicago", "ivy", 38.5, 8),
        (10, "san_francisco", "jo", 11.0, 9),
    ]
)
# ride 2 and 5: corrected fares with newer event times (they win); ride 7: a late, stale
# event with an older time than the stored one (it must lose); ride 11: a new ride.
UPSERT = _rides(
    [
        (2, "san_francisco", "bo", 35.5, 20),
        (5, "chicago", "ed", 24.0, 21),
        (7, "san_francisco", "gus", 99.0, 1),
        (11, "new_york", "kim", 19.0, 22),
    ]
)
DELETE_KEYS = pa.table({"ride_id": pa.array([4], pa.int64()), "city": ["new_york"]})


def _say(text: str = "") -> None:
    print(text, flush=True)


def _heading(step: str, text: str) -> None:
    _say()
    _say(f"== {step}: {text}")


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["ride_id"])


def _event_time(ts_ms: int) -> str:
    return dt.datetime.fromtimestamp(ts_ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%MZ")


def _show(table: pa.Table, columns: Sequence[str] | None = None) -> None:
    """Print rows sorted by ride; the ordering field ts (epoch ms) is shown as event_time."""
    rows = [{**r, "event_time": _event_time(r["ts"])} if "ts" in r else r for r in _rows(table)]
    _say(format_table(rows, columns))


def _commit_line(result: CommitResult) -> str:
    s = result.summary()
    return (
        f"   committed {s['action']} {s['instant']} ({s['operation'].lower()}): "
        f"{s['inserts']} inserted, {s['updates']} updated, {s['deletes']} deleted, {s['files']} file(s)"
    )


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise DemoCheckFailed(what)
    _say(f"   check: {what} - ok")


def _default_path() -> Path:
    base = Path("demo-output") / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


# ------------------------------------------------------------------------------ steps


def create_table(path: Path) -> HudiTable:
    _heading("1", f"create a Copy-on-Write table at {path.resolve()}")
    table = HudiTable.create(
        str(path),
        name="rides",
        record_key="ride_id",
        partition_by="city",
        ordering_field="ts",
        hive_style=True,
    )
    _say("   record key ride_id, partitioned by city (hive style: city=...), ordering field ts")
    _say("   (event time in epoch milliseconds, shown below as event_time):")
    _say(f"   when two versions of a ride meet, the larger ts wins ({table.merge_mode.value}).")
    return table


def insert_rides(table: HudiTable) -> CommitResult:
    _heading("2", f"insert {INITIAL.num_rows} rides")
    _show(INITIAL, SHOWN_COLUMNS)
    result = table.write(INITIAL, operation="insert")
    _say(_commit_line(result))
    return result


def upsert_rides(table: HudiTable) -> CommitResult:
    _heading("3", "upsert: fix rides 2 and 5, a stale update of ride 7, a new ride 11")
    _say("   ride 7's update carries ts older than the stored one, so the stored version stays.")
    _show(UPSERT, SHOWN_COLUMNS)
    result = table.write(UPSERT, operation="upsert")
    _say(_commit_line(result))
    return result


def delete_ride(table: HudiTable) -> CommitResult:
    _heading("4", "delete ride 4 (the delete input holds only the key and partition columns)")
    result = table.write(DELETE_KEYS, operation="delete")
    _say(_commit_line(result))
    return result


def show_timeline(table: HudiTable) -> None:
    _heading("5", "the timeline: one completed instant per commit")
    rows = [
        {"instant": i.time, "action": i.action, "state": i.state.value, "completed": i.completion_time}
        for i in table.instants()
    ]
    _say(format_table(rows))


def snapshot_read(table: HudiTable) -> None:
    _heading("6", "snapshot read: the latest state of every ride")
    snapshot = table.read(meta_columns=False)
    _show(snapshot, SHOWN_COLUMNS)
    rows = {r["ride_id"]: r for r in snapshot.to_pylist()}
    _check(4 not in rows, "ride 4 is deleted")
    _check(rows[2]["fare"] == 35.5 and rows[5]["fare"] == 24.0, "rides 2 and 5 carry their newer fares")
    _check(rows[7]["fare"] == 27.0, "ride 7 kept its fare: the stale update (older ts) did not win")
    _check(11 in rows and len(rows) == 10, "ride 11 was added (10 rides in all)")


def time_travel_read(table: HudiTable, first: CommitResult) -> None:
    _heading("7", f"time travel: the table as of the first commit ({first.instant_time})")
    old = table.read(as_of=first.instant_time, meta_columns=False)
    _show(old, SHOWN_COLUMNS)
    _check(_rows(old) == _rows(INITIAL), "the as-of read equals the 10 rides first inserted")


def filtered_read(table: HudiTable) -> None:
    _heading("8", "filtered, projected read: San Francisco rides with fare >= 20")
    _say("   partition pruning skips the other cities' files; only the requested columns are returned.")
    result = table.read(
        columns=["ride_id", "rider", "fare"],
        filters=[("city", "==", "san_francisco"), ("fare", ">=", 20)],
    )
    _show(result)
    _check(
        sorted(r["ride_id"] for r in result.to_pylist()) == [2, 7],
        "rides 2 and 7 are the San Francisco rides with fare >= 20",
    )
    _say("   the same read from the command line:")
    _say(
        f"   inlet read {table.base_path} --filter 'city == san_francisco' --filter 'fare >= 20' "
        "--columns ride_id,rider,fare"
    )


def run(path: Path) -> None:
    table = create_table(path)
    first = insert_rides(table)
    upsert_rides(table)
    delete_ride(table)
    show_timeline(table)
    snapshot_read(table)
    time_travel_read(table, first)
    filtered_read(table)
    _say()
    _say(f"done: the table is at {table.base_path}; try `inlet timeline {table.base_path}`.")


def main(argv: Sequence[str] | None = None) -> int:
    """``--library``: this tour of the table API; otherwise the replication demo (the main job)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--library" not in argv:
        from inlet.services import replication_demo

        return replication_demo.main(argv)
    argv.remove("--library")
    parser = argparse.ArgumentParser(
        prog="python -m inlet.services.demo --library",
        description="Build a small Hudi table with Inlet, change it and read it back, explaining each step.",
    )
    parser.add_argument(
        "--path",
        type=Path,
        help="directory for the demo table (must not hold a table yet; default ./demo-output/<timestamp>)",
    )
    args = parser.parse_args(argv)
    logs.configure()
    try:
        run(args.path or _default_path())
    except BrokenPipeError:  # stdout's reader went away (e.g. `| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (InletError, DemoCheckFailed, OSError) as e:
        print(f"demo: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
