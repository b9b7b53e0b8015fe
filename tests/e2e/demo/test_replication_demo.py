"""``python -m inlet.services.demo`` (what ``make demo`` runs): the whole pipeline, then its proof.

The demo checks its own results (PostgreSQL == Inlet's read == hudi-rs's reads) and exits 1 when
they differ; this test runs it small, and checks it stopped everything it started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inlet.core import HudiTable

pytestmark = pytest.mark.slow


def test_replication_demo_runs_the_main_job_and_proves_it(server_dir: Path) -> None:
    stack = server_dir / "stack"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INLET_")}
    proc = subprocess.run(
        [sys.executable, "-m", "inlet.services.demo", "--dir", str(stack), "--scale", "40"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    for table in ("customers", "orders", "order_lines"):
        row = next(line for line in lines if line.strip().startswith(table + " "))
        assert row.split()[-1] == "equal", row
    assert any("commit events on inlet.commits" in line for line in lines)
    registered = {line.split()[0] for line in lines if line.strip().startswith("app_public.")}
    assert registered == {
        f"app_public.{t}{s}" for t in ("customers", "orders", "order_lines") for s in ("", "_ro", "_rt")
    }

    # the lake outlives the stack: 40 customers + the newcomer, an eighth renamed vip, all with tiers
    customers = HudiTable.open(str(stack / "lake" / "app" / "public" / "customers")).read().to_pylist()
    assert len(customers) == 41
    assert sum(1 for c in customers if c["name"].endswith("(vip)")) == 10
    assert {c["tier"] for c in customers} == {"gold", "silver", "bronze", None}
    assert all(c["bio"] != "__debezium_unavailable_value" for c in customers)

    # everything the stack started is gone
    state = json.loads((stack / "stack.json").read_text())
    assert state["state"] == "stopped"
    assert [c["name"] for c in state["components"] if c["alive"]] == []
    with pytest.raises(ProcessLookupError):
        os.kill(state["supervisor_pid"], 0)
