"""Tables on a real S3-compatible store (SeaweedFS): every table operation, crash points, locking.

One server per module; each test has its own prefix (``s3_lake``) and reaches the store through the
usual AWS environment variables.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from support import hudi_rs
from support.tables import rows, run_python, trips

from inlet.core import HudiTable, faults, storage_requests
from inlet.core.commit.locks import LOCK_PATH, table_lock
from inlet.core.errors import UnsupportedError
from inlet.core.s3 import ConditionalS3, S3Options
from inlet.core.storage import Storage
from inlet.core.storage_requests import RequestCounts
from inlet.services.stack.s3 import EmbeddedS3


def _objects(server: EmbeddedS3, uri: str) -> list[str]:
    from pyarrow import fs as pafs

    root = uri.removeprefix("s3://")
    infos = server.filesystem().get_file_info(pafs.FileSelector(root, recursive=True))
    return sorted(i.path[len(root) + 1 :] for i in infos if i.type == pafs.FileType.File)


def _data(table: HudiTable) -> list[dict[str, Any]]:
    return [{k: r[k] for k in ("id", "city", "name")} for r in rows(table.read())]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_write_read_update_delete_and_table_services_on_s3(
    s3_server: EmbeddedS3, s3_lake: str, table_type: str
) -> None:
    t = HudiTable.create(
        s3_lake,
        name="trips",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type=table_type,
    )
    storage = t.storage
    assert storage.is_object_store and storage.requests is not None
    before = storage.requests.snapshot()
    t.write(trips([1, 2, 3], ["sf", "sf", "nyc"], 1, "a"), operation="insert")
    t.write(trips([2, 4], ["sf", "nyc"], 2, "b"), operation="upsert")
    t.write(trips([3], ["nyc"], 3, "x"), operation="delete")
    assert storage.requests.snapshot()["COPY"] == before["COPY"]  # no rename: nothing copied

    reopened = HudiTable.open(s3_lake)
    expected = [
        {"id": 1, "city": "sf", "name": "a-1"},
        {"id": 2, "city": "sf", "name": "b-2"},
        {"id": 4, "city": "nyc", "name": "b-4"},
    ]
    assert _data(reopened) == expected
    timeline = reopened.load_timeline()
    assert len(timeline.completed()) == 3
    objects = _objects(s3_server, s3_lake)
    assert not [o for o in objects if o.endswith(".tmp") or o.endswith("/")], objects
    assert not [o for o in objects if o.startswith(".hoodie/.aux/inlet.lock")]  # the lock was released

    if table_type == "MERGE_ON_READ":
        assert t.compact({"hoodie.compact.inline.max.delta.commits": "1"}) is not None
        assert any(i.action == "commit" for i in t.load_timeline().completed())
    t.write(trips([1], ["sf"], 4, "d"), operation="upsert")
    t.write(trips([1], ["sf"], 5, "e"), operation="upsert")
    cleaned = t.clean({"hoodie.clean.commits.retained": "1"})
    assert cleaned.files_deleted, "the clean deleted nothing"
    final = HudiTable.open(s3_lake)
    assert not final.load_timeline().pending()
    assert _data(final) == [{"id": 1, "city": "sf", "name": "e-1"}, *expected[1:]]


_WRITE = """
import sys
from inlet.core import HudiTable
import pyarrow as pa
i = int(sys.argv[2])
rows = pa.table({"id": [i], "city": ["sf"], "ts": [9], "fare": [1.0], "name": [f"{sys.argv[3]}-{i}"]})
HudiTable.open(sys.argv[1]).write(rows, operation="upsert")
"""


CRASH_POINTS = (
    faults.AFTER_REQUESTED,
    faults.AFTER_INFLIGHT,
    faults.AFTER_DATA_FILES,
    faults.BEFORE_COMPLETE,
)


def test_crash_at_each_write_step_leaves_the_table_readable_and_is_rolled_back(s3_lake: str) -> None:
    """One table per crash point; the writers that die run at the same time (seconds each)."""
    paths = {point: f"{s3_lake}/{point}" for point in CRASH_POINTS}
    for path in paths.values():
        t = HudiTable.create(
            path,
            name="trips",
            record_key="id",
            partition_by="city",
            ordering_field="ts",
            table_type="MERGE_ON_READ",
        )
        t.write(trips([1, 2], ["sf", "nyc"], 1, "a"), operation="insert")
    with ThreadPoolExecutor(len(paths)) as pool:
        codes = dict(
            zip(
                paths,
                pool.map(lambda p: run_python(_WRITE, paths[p], "1", "lost", crash_at=p), paths),
                strict=True,
            )
        )
    assert codes == dict.fromkeys(paths, faults.CRASH_EXIT_CODE)
    before = [{"id": 1, "city": "sf", "name": "a-1"}, {"id": 2, "city": "nyc", "name": "a-2"}]
    for point, path in paths.items():
        assert _data(HudiTable.open(path)) == before, point
        assert HudiTable.open(path).load_timeline().pending(), f"{point}: no pending instant left"

        # the next write (here: this process; the crashed one is gone) rolls the failed one back
        HudiTable.open(path).write(trips([3], ["sf"], 9, "next"), operation="upsert")
        after = HudiTable.open(path)
        assert _data(after) == [*before, {"id": 3, "city": "sf", "name": "next-3"}], point
        timeline = after.load_timeline()
        assert not timeline.pending(), point
        assert any(i.action == "rollback" for i in timeline.completed()), point


def test_hudi_rs_reads_an_s3_table_with_storage_options(s3_options: S3Options, s3_lake: str) -> None:
    t = HudiTable.create(
        s3_lake,
        name="trips",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
    )
    t.write(trips([1, 2, 3], ["sf", "sf", "nyc"], 1, "a"), operation="insert")
    t.write(trips([2], ["sf"], 2, "b"), operation="upsert")
    t.write(trips([3], ["nyc"], 3, "x"), operation="delete")
    expected = _data(t)
    assert [r["name"] for r in expected] == ["a-1", "b-2"]
    for version in hudi_rs.READER_VERSIONS:
        got = hudi_rs.read(s3_lake, version, storage_options=s3_options.hudi_rs_options())
        assert got is not None
        assert [{k: r[k] for k in ("id", "city", "name")} for r in rows(got)] == expected, version


_LOCKED_WRITE = """
import sys
from inlet.core import HudiTable
from inlet.core.commit.locks import LockTimeoutError
import pyarrow as pa
rows = pa.table({"id": [7], "city": ["sf"], "ts": [9], "fare": [1.0], "name": ["w-7"]})
try:
    HudiTable.open(sys.argv[1]).write(rows, operation="upsert")
except LockTimeoutError as e:
    print(e)
    sys.exit(3)
"""


def test_writers_on_different_machines_share_the_tables_lock_object(
    s3_lake: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A writer with another temp directory (as on another machine) waits for the lock this process
    holds, and takes a lock left behind by a dead process at once."""
    t = HudiTable.create(s3_lake, name="trips", record_key="id", ordering_field="ts")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("INLET_S3_LOCK_WAIT_S", "1")
    with table_lock(t.storage):
        assert t.storage.exists(LOCK_PATH)
        assert run_python(_LOCKED_WRITE, s3_lake) == 3
    assert not t.storage.exists(LOCK_PATH)

    # a lock object left by a process of this host that is gone is taken over without waiting
    dead = {
        "host": __import__("socket").gethostname(),
        "pid": 2**22 + 12345,
        "pid_ns": _pid_ns(),
        "expires_ms": int(time.time() * 1000) + 600_000,
    }
    t.storage.write_atomic(LOCK_PATH, json.dumps(dead).encode())
    t.write(trips([7], ["sf"], 9, "w"), operation="upsert")  # within the 1 s wait
    assert [r["id"] for r in rows(HudiTable.open(s3_lake).read())] == [7]


def _pid_ns() -> str:
    import os

    return os.readlink("/proc/self/ns/pid")


def _held(t: HudiTable) -> dict[str, Any]:
    held: dict[str, Any] = json.loads(t.storage.read_bytes(LOCK_PATH))
    return held


def test_a_long_commit_renews_its_lock_so_a_writer_elsewhere_does_not_break_it(
    s3_lake: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """With a 1 s lease this process holds the lock for several leases; a writer elsewhere (another
    process and temp directory) finds the lease renewed, waits, and gives up instead of breaking it."""
    t = HudiTable.create(s3_lake, name="trips", record_key="id", ordering_field="ts")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("INLET_S3_LOCK_LEASE_S", "1")
    monkeypatch.setenv("INLET_S3_LOCK_WAIT_S", "1.5")
    with table_lock(t.storage):
        first = _held(t)
        # the lease is the thing under test: wait until the first one is a second past its end
        time.sleep(max(0.0, first["expires_ms"] / 1000 + 1 - time.time()))
        assert run_python(_LOCKED_WRITE, s3_lake) == 3  # timed out waiting: the lock was not broken
        now = _held(t)
        assert now["id"] == first["id"] and now["expires_ms"] > first["expires_ms"] + 1000
    assert not t.storage.exists(LOCK_PATH)  # released: the renewals kept its ETag in step
    assert not t.load_timeline().instants  # the other writer wrote nothing


def test_an_expired_lock_of_a_dead_writer_elsewhere_is_broken(
    s3_lake: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lock left by a writer on another machine (its pid cannot be checked) is taken over once its
    lease expired, and not before."""
    t = HudiTable.create(s3_lake, name="trips", record_key="id", ordering_field="ts")
    monkeypatch.setenv("INLET_S3_LOCK_WAIT_S", "30")
    left = {
        "host": "another-machine",
        "pid": 4242,
        "pid_ns": None,
        "id": "dead",
        "expires_ms": int(time.time() * 1000) + 1500,
    }
    t.storage.write_atomic(LOCK_PATH, json.dumps(left).encode())
    t.write(trips([7], ["sf"], 9, "w"), operation="upsert")
    assert time.time() * 1000 >= left["expires_ms"]  # it waited for the lease to run out
    assert [r["id"] for r in rows(HudiTable.open(s3_lake).read())] == [7]
    assert not t.storage.exists(LOCK_PATH)


def test_local_lock_writers_are_refused_on_a_store_without_conditional_writes(
    s3_options: S3Options, s3_lake: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = HudiTable.create(s3_lake, name="trips", record_key="id", ordering_field="ts")
    # SeaweedFS honours If-None-Match; a store that ignores it is injected (no real one at hand)
    monkeypatch.setitem(ConditionalS3._probed, (s3_options.endpoint, "lake"), False)
    with pytest.raises(UnsupportedError, match="coordinator"):
        t.write(trips([1], ["sf"], 1, "a"), operation="insert")
    assert not t.load_timeline().instants  # refused before anything was written


def test_conditional_requests_take_credentials_from_a_profile(
    s3_server: EmbeddedS3, s3_lake: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """No keys in the environment: pyarrow and the lock's conditional requests both find them in
    ``AWS_PROFILE``'s section of the shared credentials file (the AWS default chain)."""
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    (tmp_path / "credentials").write_text(
        f"[lake]\naws_access_key_id = {s3_server.access_key}\n"
        f"aws_secret_access_key = {s3_server.secret_key}\n"
        "[wrong]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n"
    )
    (tmp_path / "config").write_text("[profile lake]\nregion = us-east-1\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_PROFILE", "lake")
    assert S3Options.from_env().access_key is None
    t = HudiTable.create(s3_lake, name="trips", record_key="id", ordering_field="ts")
    t.write(trips([1, 2], ["sf", "ny"], 1, "a"), operation="insert")  # under the lock object
    t.write(trips([2], ["ny"], 2, "b"), operation="upsert")
    assert [(r["id"], r["name"]) for r in rows(HudiTable.open(s3_lake).read())] == [(1, "a-1"), (2, "b-2")]
    assert not t.storage.exists(LOCK_PATH)
    monkeypatch.setenv("AWS_PROFILE", "wrong")  # the profile's keys are the ones signing
    with pytest.raises(OSError, match="HTTP 403"):
        ConditionalS3(S3Options.from_env(), "lake").put_if_absent("x", b"1")


def test_explicit_options_win_over_the_environment(
    s3_options: S3Options, s3_lake: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # nothing listens there
    storage = Storage(s3_lake, s3=s3_options)
    storage.write_atomic("x", b"1")
    assert storage.read_bytes("x") == b"1"
    assert S3Options.from_env(endpoint="http://h:1").endpoint == "http://h:1"
    assert S3Options.from_env().endpoint == "http://127.0.0.1:9"


def test_cli_takes_s3_paths_with_the_endpoint_as_a_flag(
    s3_server: EmbeddedS3, s3_lake: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: Any
) -> None:
    from inlet.services.cli.main import main

    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")  # only the credentials stay in the environment
    flag = ["--s3-endpoint", s3_server.endpoint]
    create = ["table", "create", s3_lake, "--name", "t", "--record-key", "id", "--ordering-field", "ts"]
    assert main([*create, *flag]) == 0
    data = tmp_path / "in.jsonl"
    data.write_text('{"id": 1, "ts": 1, "name": "a"}\n{"id": 2, "ts": 1, "name": "b"}\n')
    assert main(["write", s3_lake, "--op", "upsert", "--input", str(data), *flag]) == 0
    capsys.readouterr()
    assert main(["read", s3_lake, "--no-meta", *flag]) == 0
    assert sorted(json.loads(line)["name"] for line in capsys.readouterr().out.splitlines()) == ["a", "b"]
    assert main(["read", s3_lake, "--s3-endpoint", "127.0.0.1:1"]) == 1
    assert "S3 endpoint must be an http(s) URL" in capsys.readouterr().err


def test_services_expose_the_object_store_requests_as_a_metric(s3_lake: str) -> None:
    import urllib.request

    from prometheus_client import CollectorRegistry

    from inlet.services.runtime import serve_http

    storage = Storage(s3_lake)
    storage.write_atomic("x", b"1")
    storage.read_bytes("x")
    assert storage.requests is not None
    gets = storage.requests.snapshot()["GET"]
    endpoint = serve_http("127.0.0.1:0", CollectorRegistry(), lambda: (True, {}))
    try:
        with urllib.request.urlopen(f"http://{endpoint.address}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    finally:
        endpoint.stop()
    assert f'inlet_object_store_requests_total{{bucket="lake",kind="GET"}} {float(gets)}' in text, text


def test_a_commits_requests_do_not_grow_with_the_tables_age(
    s3_lake: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every commit upserts into a partition of its own, and archive runs between commits as the
    table services do. Counted with 10-key LIST pages (S3's are 1,000 keys: a listing that grows
    shows here at 50 commits as it would on S3 at 5,000), the 50th commit costs no more requests
    than the 10th (ten commits around each, averaged): it lists only the partition it writes and an active timeline archive keeps short."""
    monkeypatch.setattr(storage_requests, "LIST_PAGE", 10)
    t = HudiTable.create(s3_lake, name="trips", record_key="id", ordering_field="ts", partition_by="city")
    counts = t.storage.requests
    assert counts is not None
    per_commit: dict[int, dict[str, int]] = {}
    for i in range(1, 51):
        before = counts.snapshot()
        t.write(trips([i], [f"c{i:02d}"], i, "w"), operation="upsert")
        per_commit[i] = RequestCounts.diff(counts.snapshot(), before)
        t.archive({"hoodie.keep.min.commits": "3", "hoodie.keep.max.commits": "5"})

    def window(last: int, kind: str | None = None) -> int:
        """Requests of the ten commits up to ``last`` (archive trims the timeline in a sawtooth)."""
        return sum(
            sum(c.values()) if kind is None else c[kind]
            for c in map(per_commit.get, range(last - 9, last + 1))
            if c
        )

    assert window(50) <= window(15), {i: per_commit[i] for i in (10, 50)}
    assert window(50, "LIST") <= window(15, "LIST"), {i: per_commit[i] for i in (10, 50)}
