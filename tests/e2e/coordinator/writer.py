"""A writer process for the coordinator e2e tests: ``python writer.py JOB.json``.

It opens one table with a :class:`GrpcCommitProtocol` (a real gRPC client of the coordinator
subprocess) and runs the job's writes one after the other with ``HudiTable.write``. Every step is
appended to the job's ``out`` file as one JSON line (with ``at``, its wall-clock time), flushed and
fsynced at once, so a test that kills this process (or the coordinator) still knows what was
acknowledged:

- ``{"event": "begun", "write": i, "instant": t}`` when BeginInstant answered,
- ``{"event": "acked", "write": i, "instant": t, "completion": c, "action": a}`` when the commit
  returned (the client's acknowledgement),
- ``{"event": "failed", "write": i, "instant": t|null, "error": class name, "message": ...,
  "other": conflicting instant|null, "file_groups": [[partition, file id], ...]}``.

Gates order concurrent writers through files in ``gate_dir`` (the test decides the interleaving):

- ``begin_after``: names whose ``<name>.begun`` / ``<name>.done`` files (given as ``name.kind``)
  must exist before this writer calls BeginInstant (it writes ``<me>.planned`` first: its write
  is planned by then);
- ``complete_after``: the same, before CompleteInstant; the writer first writes ``<me>.ready``
  (its data files are written by then);
- after CompleteInstant returns or fails the writer writes ``<me>.done``.

Job keys: ``target``, ``table_id``, ``path``, ``name``, ``out``, ``writes`` (list of
``{"op": ..., "rows": [...]}``), optional ``gate_dir``, ``begin_after``, ``complete_after``,
``retries`` (UNAVAILABLE retries per call), ``backoff_s``, ``max_backoff_s``, ``pause_s`` (between
writes), ``options`` (Hudi write options).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from inlet.core import HudiTable
from inlet.core.storage import Storage
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Instant
from inlet.services.coordinator_client.client import ConflictError, CoordinatorClient, GrpcCommitProtocol

SCHEMA = pa.schema([("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64()), ("fare", pa.float64())])
GATE_TIMEOUT_S = 120.0


class Journal:
    """The out file: one JSON line per step, durable before the step is taken as done."""

    def __init__(self, path: str) -> None:
        self.f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process

    def log(self, **entry: Any) -> None:
        self.f.write(json.dumps({**entry, "at": time.time()}) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())


def wait_for(gate_dir: Path, names: list[str]) -> None:
    deadline = time.monotonic() + GATE_TIMEOUT_S
    for name in names:
        while not (gate_dir / name).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate {name} not opened within {GATE_TIMEOUT_S} s")
            time.sleep(0.01)


def touch(gate_dir: Path | None, name: str) -> None:
    if gate_dir is not None:
        (gate_dir / name).write_text("")


class GatedProtocol(GrpcCommitProtocol):
    """The real protocol, with gates before BeginInstant and CompleteInstant and a journal entry
    for every instant it begins."""

    def __init__(self, *args: Any, job: dict[str, Any], journal: Journal, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.job = job
        self.journal = journal
        self.gate_dir = Path(job["gate_dir"]) if job.get("gate_dir") else None
        self.write_no = -1
        self.write_instant: str | None = None

    def begin(self, action: str, requested_content: bytes = b"") -> Instant:
        is_write = self.write_instant is None and action != "rollback"
        if is_write and self.gate_dir is not None:
            touch(self.gate_dir, f"{self.job['name']}.planned")
            wait_for(self.gate_dir, self.job.get("begin_after", []))
        instant = super().begin(action, requested_content)
        if is_write:
            self.write_instant = instant.time
            self.journal.log(event="begun", write=self.write_no, instant=instant.time, action=action)
            touch(self.gate_dir, f"{self.job['name']}.begun")
        return instant

    def complete(self, instant: Instant, metadata: CommitMetadata) -> Instant:
        if self.gate_dir is not None:
            touch(self.gate_dir, f"{self.job['name']}.ready")
            wait_for(self.gate_dir, self.job.get("complete_after", []))
        try:
            return super().complete(instant, metadata)
        finally:
            touch(self.gate_dir, f"{self.job['name']}.done")


def main(job_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    journal = Journal(job["out"])
    client = CoordinatorClient(
        job["target"],
        timeout_s=60,
        retries=int(job.get("retries", 30)),
        backoff_s=float(job.get("backoff_s", 0.05)),
        max_backoff_s=float(job.get("max_backoff_s", 0.5)),
    )
    protocol = GatedProtocol(
        client, job["table_id"], Storage(job["path"]), writer_id=job["name"], job=job, journal=journal
    )
    failures = 0
    try:
        for i, write in enumerate(job["writes"]):
            protocol.write_no, protocol.write_instant = i, None
            table = HudiTable.open(job["path"], commit_protocol=protocol)
            data = pa.Table.from_pylist(write["rows"], schema=SCHEMA)
            try:
                res = table.write(data, write["op"], options=job.get("options"))
            except Exception as e:  # journaled: the test decides whether it was expected
                failures += 1
                conflict = getattr(e, "conflict", None)
                journal.log(
                    event="failed",
                    write=i,
                    instant=protocol.write_instant,
                    error=type(e).__name__,
                    conflict=isinstance(e, ConflictError),
                    message=str(e),
                    other=conflict.other.instant_time if conflict is not None else None,
                    file_groups=[[g.partition_path, g.file_id] for g in conflict.file_groups]
                    if conflict
                    else [],
                )
            else:
                journal.log(
                    event="acked",
                    write=i,
                    instant=res.instant_time,
                    completion=res.completion_time,
                    action=res.action,
                )
            time.sleep(float(job.get("pause_s", 0)))
    finally:
        protocol.close()
        client.close()
    return 3 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
