"""``inlet stack up | status | down`` as a user runs them: the supervisor is a background process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import check_offsets, compare_inlet, processes_mentioning, wait_for, wait_for_lake

pytestmark = pytest.mark.slow

COMPONENTS = {
    "postgres",
    "s3",
    "kafka",
    "coordinator",
    "debezium",
    "cdc_consumer",
    "writer",
    "table_services",
}


def inlet(*args: str, timeout: float = 400) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "inlet.services.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"inlet {' '.join(args)} failed: {proc.stderr[-2000:]}"
    return proc.stdout


def status(d: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(inlet("stack", "status", "--dir", str(d), "--json"))
    return data


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class Lake:
    """What the comparison helpers need of a stack: its PostgreSQL URL and where tables land."""

    url: str
    lake: Path
    database: str

    def table_path(self, table: str) -> Path:
        return self.lake / self.database / "public" / table


def test_stack_up_status_restart_down_and_up_again(server_dir: Path) -> None:
    """``up`` prints every address and returns once healthy; ``status --json`` lists every
    component with its pid and health; a SIGKILLed component is restarted by the supervisor (its
    restart count goes up and logs/supervisor.log says so) and changes keep flowing; ``down``
    leaves no process of the stack; ``up`` on the same directory resumes: changes made after it
    appear once, and nothing is replicated twice (no duplicate key, no offset consumed twice)."""
    d = server_dir / "stack"
    try:
        addresses = json.loads(
            inlet("stack", "up", "--dir", str(d), "--batch-interval-ms", "500").splitlines()[-1]
        )
        assert set(addresses) >= COMPONENTS
        url = addresses["postgres"]["url"]
        for host_port in (addresses["kafka"]["bootstrap"], addresses["coordinator"]["address"]):
            assert host_port.startswith("127.0.0.1:")
        lake = Lake(url, Path(addresses["lake"]), url.rsplit("/", 1)[1])

        st = status(d)
        assert st["state"] == "running"
        comps = {c["name"]: c for c in st["components"]}
        assert set(comps) >= COMPONENTS  # and catalog sync with its metastore, where the stack runs them
        for c in comps.values():
            assert isinstance(c["pid"], int) and alive(c["pid"]), c
            assert c["healthy"] is True and c["restarts"] == 0, c

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE cli_items (id int PRIMARY KEY, v text, at timestamptz DEFAULT now())")
            conn.execute("INSERT INTO cli_items (id, v) SELECT g, 'v' || g FROM generate_series(1, 50) g")
        wait_for_lake(lake, ["cli_items"], 120)  # type: ignore[arg-type]

        # a killed component is restarted and says so
        old = comps["cdc_consumer"]["pid"]
        os.kill(old, signal.SIGKILL)

        def restarted() -> dict[str, Any] | None:
            c = {c["name"]: c for c in status(d)["components"]}["cdc_consumer"]
            return c if c["restarts"] == 1 and c["pid"] not in (None, old) and c["healthy"] else None

        wait_for(restarted, 90, "the supervisor to restart the CDC consumer")
        log = (d / "logs" / "supervisor.log").read_text()
        died = [json.loads(line) for line in log.splitlines() if "component died" in line]
        assert [e.get("component") for e in died] == ["cdc_consumer"], died
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE cli_items SET v = v || '!' WHERE id <= 10")
            conn.execute("DELETE FROM cli_items WHERE id > 45")
        wait_for_lake(lake, ["cli_items"], 120)  # type: ignore[arg-type]

        # down: nothing left
        pids = [c["pid"] for c in status(d)["components"] if c.get("pid")]
        stopped = json.loads(inlet("stack", "down", "--dir", str(d)))
        assert stopped["was_running"] is True
        assert not [p for p in pids if alive(p)], "a component outlived down"
        assert not processes_mentioning(str(d)), "a process of the stack outlived down"
        assert status(d)["state"] == "stopped"
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url, connect_timeout=3).close()

        # up again: same addresses, the pipeline resumes where it was
        again = json.loads(inlet("stack", "up", "--dir", str(d)).splitlines()[-1])
        assert again["postgres"]["url"] == url
        assert again["kafka"]["bootstrap"] == addresses["kafka"]["bootstrap"]
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO cli_items (id, v) VALUES (1000, 'after the restart')")
            conn.execute("UPDATE cli_items SET v = 'changed after the restart' WHERE id = 2")
        wait_for_lake(lake, ["cli_items"], 180)  # type: ignore[arg-type]
        compare_inlet(lake, "cli_items")  # type: ignore[arg-type]
        check_offsets(lake.table_path("cli_items"))
        assert all(c["restarts"] == 0 for c in status(d)["components"])  # a new supervisor
    finally:
        if (d / "supervisor.pid").exists():
            subprocess.run(
                [sys.executable, "-m", "inlet.services.cli.main", "stack", "down", "--dir", str(d)],
                capture_output=True,
                timeout=300,
            )
        deadline = time.monotonic() + 30
        while processes_mentioning(str(d)) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = processes_mentioning(str(d))
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"processes of the stack left running: {left}"
