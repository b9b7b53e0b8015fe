"""``inlet metastore serve``: the embedded Hive Metastore 4 (with an embedded PostgreSQL for its catalog) as a
process of its own, loopback only, stoppable."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from inlet.services.catalog_sync import MetastoreClient
from inlet.services.stack.processes import free_port, group_members


def listeners(port: int) -> list[str]:
    """Local addresses listening on ``port`` (from ``ss``)."""
    out = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3] for line in out.splitlines() if line.split()[3].endswith(f":{port}")]


def serve(data: Path, port: int) -> tuple[subprocess.Popen[str], dict[str, object]]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inlet.services.cli.main",
            "metastore",
            "serve",
            "--dir",
            str(data),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else ""
    return proc, json.loads(line)


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    deadline = time.monotonic() + 10
    while group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert group_members(proc.pid) == []


def test_serve_binds_loopback_persists_and_stops_cleanly(server_dir: Path) -> None:
    data = server_dir / "hms"  # PostgreSQL's unprivileged user must reach it: not under pytest's tmp
    port = free_port()
    proc, hello = serve(data, port)
    try:
        assert hello["event"] == "serving" and hello["uri"] == f"thrift://127.0.0.1:{port}"
        assert listeners(port) and all("127.0.0.1" in a for a in listeners(port)), listeners(port)
        with MetastoreClient(str(hello["uri"])) as c:
            from hmsclient.genthrift.hive_metastore.ttypes import Database

            c.call("create_database", Database("kept", "", None, None))
    finally:
        stop(proc)
    assert listeners(port) == []
    assert not (data / "postgres" / "data" / "postmaster.pid").exists()  # its PostgreSQL stopped too
    # the catalog is in the PostgreSQL under --dir, the warehouse beside it
    assert (data / "postgres" / "data" / "PG_VERSION").is_file() and (data / "warehouse" / "kept.db").is_dir()
    proc, hello = serve(data, port)  # same directory: the catalog survives
    try:
        with MetastoreClient(str(hello["uri"])) as c:
            assert sorted(c.call("get_all_databases")) == ["default", "kept"]
    finally:
        stop(proc)


def test_serve_refuses_a_non_loopback_address(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "inlet.services.cli.main",
            "metastore",
            "serve",
            "--dir",
            str(tmp_path),
            "--listen",
            "0.0.0.0:9083",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ},
    )
    assert done.returncode == 2 and "loopback" in done.stderr
