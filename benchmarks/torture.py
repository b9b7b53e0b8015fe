"""The torture test's long run: a random workload while every process of the pipeline dies.

    .venv/bin/python benchmarks/torture.py [--seconds 600] [--big-tx 100000] [--seeds 22,23]

Runs ``tests/e2e/replication/test_torture.py`` (see its docstring: the workload, the faults and
what is checked at the end) once per seed, with fault rounds repeated for ``--seconds`` of workload
and a large transaction of ``--big-tx`` rows, and prints one row per run: the faults injected,
the row changes made, how long the lake took to equal PostgreSQL after the workload stopped, and
how long ``inlet verify`` took. A run that finds a difference fails, and its pytest output is shown.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/e2e/replication/test_torture.py"


def run(seconds: float, big_tx: int, seed: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="inlet-torture-") as tmp:
        report = Path(tmp) / "report.json"
        env = {
            **os.environ,
            "INLET_TORTURE_SECONDS": str(seconds),
            "INLET_TORTURE_BIG_TX": str(big_tx),
            "INLET_TORTURE_SEED": str(seed),
            "INLET_TORTURE_REPORT": str(report),
        }
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp}/bt", TEST]
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0 or not report.exists():
            print(done.stdout[-20000:], done.stderr[-5000:], sep="\n", file=sys.stderr)
            return {"seed": seed, "failed": True}
        result: dict[str, object] = json.loads(report.read_text())
        return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--seconds", type=float, default=600.0, help="workload seconds per run (fault rounds repeat)"
    )
    parser.add_argument("--big-tx", type=int, default=100_000, help="rows of the one large transaction")
    parser.add_argument("--seeds", default="22", help="comma-separated seeds, one run each")
    args = parser.parse_args()
    results = [run(args.seconds, args.big_tx, int(s)) for s in args.seeds.split(",")]
    header = ("seed", "result", "rounds", "faults", "changes", "workload s", "lake equal after s", "verify s")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for r in results:
        if r.get("failed"):
            print(f"{r['seed']} | DIFFERENCE OR FAILURE | | | | | |")
            continue
        faults = r["faults"]
        assert isinstance(faults, dict)
        print(
            f"{r['seed']} | verify equal | {r['rounds']} | {sum(faults.values())} | {r['changes']} | "
            f"{r['workload_s']} | {r['lake_equal_after_s']} | {r['verify_s']}"
        )
    return 1 if any(r.get("failed") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
