"""The parallel run's harness (``tests/conftest.py``): a worker that crashes fails its test, leaves no
process running and does not stall the run (in CI a segfault once turned into a 90-minute timeout)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

CRASHING_MODULE = """
import os, signal, subprocess

def test_crashes():  # alone in its module: the last test of its work unit
    child = subprocess.Popen(["sleep", "600"])  # a server the worker started
    with open(os.environ["CHILD_PID_FILE"], "w") as f:
        f.write(str(child.pid))
    os.kill(os.getpid(), signal.SIGSEGV)
"""


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def test_a_crashed_worker_fails_its_test_ends_its_processes_and_the_run_goes_on(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(Path(__file__).parents[1] / "conftest.py", project / "conftest.py")
    (project / "test_crash.py").write_text(textwrap.dedent(CRASHING_MODULE))
    (project / "test_other.py").write_text("def test_one():\n    pass\n\n\ndef test_two():\n    pass\n")
    pid_file = tmp_path / "child.pid"
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*argv, "--basetemp", str(tmp_path / "basetemp"), "--rootdir", str(project), str(project)],
        cwd=project,
        # not this run's xdist marks: the nested run's controller ends the processes carrying its
        # run's marks, and with ours it killed this worker's servers (its Spark JVM, once, in CI)
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")},
            "CHILD_PID_FILE": str(pid_file),
        },
        capture_output=True,
        text=True,
        timeout=180,  # xdist's own scheduling waited forever here
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "crashed while running 'test_crash.py::test_crashes'" in out, out
    assert "1 failed, 2 passed" in out, out  # reported once, not rerun; the other unit ran
    assert not _alive(int(pid_file.read_text())), "the crashed worker's child is still running"
