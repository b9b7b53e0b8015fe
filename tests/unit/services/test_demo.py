"""``python -m inlet.services.demo``: runs, exits 0, and shows reads that match its table."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from inlet.core import HudiTable
from inlet.core.s3 import S3Options
from inlet.services import demo, replication_demo

Result = subprocess.CompletedProcess[str]


def run_demo(*args: str, cwd: Path) -> Result:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INLET_")}
    return subprocess.run(
        [sys.executable, "-m", "inlet.services.demo", "--library", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=180,
    )


def sections(output: str) -> dict[str, str]:
    """The demo's output split at its ``== `` step headings: heading -> heading and body."""
    out: dict[str, str] = {}
    heading = ""
    for line in output.splitlines():
        if line.startswith("== "):
            heading = line
            out[heading] = line + "\n"
        elif heading:
            out[heading] += line + "\n"
    return out


def section(parts: dict[str, str], keyword: str) -> str:
    found = [body for heading, body in parts.items() if keyword in heading.lower()]
    assert len(found) == 1, f"expected one step about {keyword!r} in {list(parts)}"
    return found[0]


def expected_snapshot() -> dict[int, dict[str, Any]]:
    """The demo's rides after its upsert (larger ts wins) and delete, computed from its inputs."""
    rides = {r["ride_id"]: r for r in demo.INITIAL.to_pylist()}
    for r in demo.UPSERT.to_pylist():
        old = rides.get(r["ride_id"])
        if old is None or r["ts"] >= old["ts"]:
            rides[r["ride_id"]] = r
    for key in demo.DELETE_KEYS.column("ride_id").to_pylist():
        rides.pop(key)
    return rides


def riders_in(text: str, rows: list[dict[str, Any]]) -> set[str]:
    words = set(text.split())
    return {r["rider"] for r in rows if r["rider"] in words}


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo run twice in parallel: with --path, and with the default path under a fresh cwd."""
    base = tmp_path_factory.mktemp("demo")
    explicit_cwd, default_cwd = base / "explicit", base / "default"
    explicit_cwd.mkdir()
    default_cwd.mkdir()
    table = base / "table"
    with ThreadPoolExecutor(2) as pool:
        explicit = pool.submit(run_demo, "--path", str(table), cwd=explicit_cwd)
        default = pool.submit(run_demo, cwd=default_cwd)
    return {
        "table": table,
        "explicit": explicit.result(),
        "default": default.result(),
        "default_cwd": default_cwd,
    }


def test_demo_exits_zero_and_builds_the_expected_table(demo_runs: dict[str, Any]) -> None:
    result: Result = demo_runs["explicit"]
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    rows = HudiTable.open(str(demo_runs["table"])).read(meta_columns=False).to_pylist()
    assert {r["ride_id"]: r for r in rows} == expected_snapshot()


def test_demo_prints_timeline_and_reads(demo_runs: dict[str, Any]) -> None:
    output = demo_runs["explicit"].stdout
    parts = sections(output)
    table = HudiTable.open(str(demo_runs["table"]))
    instants = table.instants()
    assert len(instants) == 3
    timeline = section(parts, "timeline")
    assert all(i.time in timeline for i in instants)

    initial = demo.INITIAL.to_pylist()
    latest = list(expected_snapshot().values())
    deleted = [r for r in initial if r["ride_id"] not in expected_snapshot()]
    assert deleted
    snapshot = section(parts, "snapshot")
    assert riders_in(snapshot, latest + deleted) == {r["rider"] for r in latest}
    for r in latest:
        assert str(r["fare"]) in snapshot

    travel = section(parts, "time travel")
    assert instants[0].time in travel
    assert riders_in(travel, initial + latest) == {r["rider"] for r in initial}
    for r in initial:
        assert str(r["fare"]) in travel

    filtered = section(parts, "filter")
    want = [r for r in latest if r["city"] == "san_francisco" and r["fare"] >= 20]
    assert want
    assert riders_in(filtered, latest) == {r["rider"] for r in want}


def test_demo_default_path_is_a_fresh_directory(demo_runs: dict[str, Any]) -> None:
    result: Result = demo_runs["default"]
    assert result.returncode == 0, result.stderr
    created = list((demo_runs["default_cwd"] / "demo-output").iterdir())
    assert len(created) == 1
    assert len(HudiTable.open(str(created[0])).read()) == len(expected_snapshot())
    assert str(created[0].resolve()) in result.stdout


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)


@pytest.mark.usefixtures("restore_logging")
def test_demo_refuses_an_existing_table(
    demo_runs: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    table = demo_runs["table"]
    before = HudiTable.open(str(table)).instants()
    assert demo.main(["--library", "--path", str(table)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "already exists" in err[0]
    assert HudiTable.open(str(table)).instants() == before


# -- the replication demo's lake option (`make demo-s3`; the run itself: tests/e2e/demo) ----------------


def test_make_demo_s3_runs_the_replication_demo_with_its_lake_on_s3() -> None:
    root = Path(__file__).resolve().parents[3]
    # as its own make, also when the suite itself runs under `make test` (no "Entering directory")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}

    def dry_run(*args: str) -> list[str]:
        done = subprocess.run(
            ["make", "--no-print-directory", "-n", *args],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout.splitlines()

    assert dry_run("demo-s3")[-1].endswith("-m inlet.services.demo --lake s3")
    assert dry_run("demo", "LAKE=s3://bucket/lake")[-1].endswith("--lake s3://bucket/lake")


@pytest.mark.parametrize("bad", ["disk", "s3://", "/tmp/lake"])
def test_replication_demo_refuses_a_bad_lake_in_one_line(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        replication_demo.main(["--lake", bad])  # refused before anything starts
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --lake" in err, err
    assert "must be local, s3 or an s3://BUCKET/PREFIX URI" in err or "names no bucket" in err, err


def test_replication_demo_reads_an_s3_lake_with_the_stack_s3_settings() -> None:
    """The stack's JSON line under ``s3`` becomes the AWS_* settings the demo reads the lake with."""
    addresses = {
        "lake": "s3://lake",
        "s3": {
            "endpoint": "http://127.0.0.1:8333",
            "access_key": "key",
            "secret_key": "secret",
            "region": "us-east-1",
            "bucket": "lake",
        },
    }
    env = replication_demo.lake_s3_env(addresses)
    opts = S3Options.from_env(env)
    assert (opts.endpoint, opts.access_key, opts.secret_key, opts.uses_path_style) == (
        "http://127.0.0.1:8333",
        "key",
        "secret",
        True,
    )
    assert replication_demo.table_uri("s3://lake", "app", "orders") == "s3://lake/app/public/orders"
    assert replication_demo.table_uri("/d/lake/", "app", "orders") == "/d/lake/app/public/orders"
    # a local lake, or an external one whose settings come from the environment: nothing to add
    assert replication_demo.lake_s3_env({"lake": "/d/lake", "s3": {"endpoint": "http://x:1"}}) == {}
