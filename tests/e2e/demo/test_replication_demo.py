"""``python -m inlet.services.demo`` (what ``make demo`` runs): the whole pipeline, then its proof.

The demo checks its own results (PostgreSQL == Inlet's read == hudi-rs's reads) and exits 1 when
they differ; this test runs it small, and checks it stopped everything it started.

Its lake is on an external S3 store (``--lake s3://warehouse/demo --s3-endpoint URL``): a SeaweedFS
of its own, not the stack's (which keeps the broker's topics), with credentials of its own in the
environment, so the lake equals PostgreSQL through Inlet's reader and both hudi-rs file-group
readers reading with storage options (the demo's proof) only if every process reached that store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inlet.core import HudiTable
from inlet.core.s3 import S3Options
from inlet.services.stack import EmbeddedS3

pytestmark = pytest.mark.slow


#: the variables that say where a store is and who signs (the test's environment must not lend them)
_STORE_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE")
_STORE_ENV += ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


@pytest.fixture
def external_store(server_dir: Path) -> Iterator[EmbeddedS3]:
    """An S3 store that is not the stack's: its own SeaweedFS process, its own credentials."""
    with EmbeddedS3(server_dir / "external-s3", access_key="warehouse", secret_key="warehouse-secret") as s3:
        s3.create_bucket("warehouse")
        yield s3


def test_replication_demo_runs_the_main_job_and_proves_it(
    server_dir: Path, external_store: EmbeddedS3
) -> None:
    stack = server_dir / "stack"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INLET_") and k not in _STORE_ENV}
    env |= {
        "AWS_ACCESS_KEY_ID": external_store.access_key,
        "AWS_SECRET_ACCESS_KEY": external_store.secret_key,
    }
    lake = "s3://warehouse/demo"
    demo = [sys.executable, "-m", "inlet.services.demo", "--dir", str(stack), "--scale", "40", "--lake", lake]
    proc = subprocess.run(
        [*demo, "--s3-endpoint", external_store.endpoint],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert f"the lake is on S3 ({external_store.endpoint})" in proc.stdout
    for table in ("customers", "orders", "order_lines"):
        row = next(line for line in lines if line.strip().startswith(table + " "))
        assert row.split()[-1] == "equal", row
    assert any("commit events on inlet.commits" in line for line in lines)
    registered = {line.split()[0] for line in lines if line.strip().startswith("app_public.")}
    assert registered == {
        f"app_public.{t}{s}" for t in ("customers", "orders", "order_lines") for s in ("", "_ro", "_rt")
    }

    # the lake outlives the stack, in the external store only: 40 customers + the newcomer, an eighth
    # renamed vip, all with tiers
    assert not (stack / "lake").exists()
    store = S3Options(
        endpoint=external_store.endpoint,
        access_key=external_store.access_key,
        secret_key=external_store.secret_key,
    )
    customers = HudiTable.open(f"{lake}/app/public/customers", s3=store).read().to_pylist()
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
