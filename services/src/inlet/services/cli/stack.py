"""``inlet stack up | down | status``: the whole replication pipeline on this machine.

``up`` starts a background supervisor (``inlet stack supervise``) and returns once every process is
healthy, printing one JSON line with the addresses; ``down`` stops it (everything, in reverse
order); ``status`` shows each process, its pid and health, and the tables the writer stopped on a
bad row with the reason (from its ``/readyz``). State and logs live in ``--dir``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from inlet.services.cli.errors import CliError, UsageError
from inlet.services.runtime import Setting, SettingsError, StopSignal, add_arguments, resolve
from inlet.services.stack.components import stopped_tables
from inlet.services.stack.supervisor import PID_FILE, STATE_FILE, Stack, StackConfig

ENV_PREFIX = "INLET_STACK_"
DEFAULT_DIR = ".inlet/stack"

DIR_SETTING = Setting(
    "dir", "--dir", "directory of the stack's data, logs and state", default=DEFAULT_DIR, metavar="DIR"
)
UP_SETTINGS = (
    DIR_SETTING,
    Setting(
        "tables",
        "--tables",
        "source tables that replicate, globs of SCHEMA.TABLE (repeatable or comma-separated)",
        kind="list",
        default=("public.*",),
        metavar="GLOB",
    ),
    Setting("database", "--database", "source database (also Debezium's topic prefix)", default="app"),
    Setting("engine", "--engine", "writer engine: local or spark", default="local", metavar="ENGINE"),
    Setting("buckets", "--buckets", "bucket-index buckets of new tables", kind="int", default=4, metavar="N"),
    Setting(
        "batch_interval_ms",
        "--batch-interval-ms",
        "longest a change waits in the writer before its commit",
        kind="int",
        default=1000,
        metavar="MS",
    ),
    Setting(
        "kafka_storage",
        "--kafka-storage",
        "where the broker keeps topics: s3 (durable: `down` + `up` resumes, a broker restart loses "
        "nothing; ~500 changes/s here) or memory (several times faster, but topics vanish when the "
        "broker stops, so only for one-shot runs that end with `down`)",
        default="s3",
        metavar="s3|memory",
    ),
    Setting(
        "catalog",
        "--catalog",
        "run a Hive Metastore and keep it in step with every commit (inlet catalog run)",
        kind="bool",
        default=True,
    ),
    Setting(
        "table_services",
        "--table-services",
        "run compaction and clean after commits in their own process (inlet table-services run); "
        "--no-table-services: the writer compacts between its batches and nothing cleans",
        kind="bool",
        default=True,
    ),
    Setting(
        "initial_load",
        "--initial-load",
        "how the rows already in the source tables reach the lake on the first start: copy (read in "
        "bulk by COPY at the replication slot's snapshot, then streamed; tables without a primary key "
        "or with a type COPY cannot render fall back to Debezium) or debezium (Debezium's snapshot "
        "through Kafka: every row an event, several times slower)",
        default="copy",
        metavar="copy|debezium",
    ),
    Setting(
        "timeout", "--timeout", "seconds to wait for a healthy stack", kind="int", default=300, metavar="S"
    ),
)

DESCRIPTION = """\
Run the whole pipeline on this machine, each part a supervised process on 127.0.0.1:
PostgreSQL (wal_level=logical) -> Debezium (Kafka Connect) -> Kafka (Tansu, topics kept in a local
S3 store) -> CDC consumer -> writer -> Hudi tables under DIR/lake/<db>/<schema>/<table>, committed
through the commit coordinator, compacted and cleaned by the table-services service, registered
in a Hive Metastore by catalog sync (database <db>_<schema>). A process that dies is restarted (logs/supervisor.log says so).
"""

UP_EPILOG = """\
examples:
  inlet stack up --dir /tmp/stack                 # prints {"postgres": ..., "kafka": ..., ...}
  psql "$(inlet stack status --dir /tmp/stack --json | jq -r .addresses.postgres.url)"
  inlet stack down --dir /tmp/stack               # a later `up` resumes where it stopped
"""


def _dir(args: argparse.Namespace) -> Path:
    try:
        return Path(resolve(args, (DIR_SETTING,), ENV_PREFIX)["dir"]).resolve()
    except SettingsError as e:
        raise UsageError(str(e)) from None


def _read_state(directory: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((directory / STATE_FILE).read_text())
        return data
    except (OSError, ValueError):
        return None


def _supervisor_pid(directory: Path) -> int | None:
    try:
        pid = int((directory / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


def _config(args: argparse.Namespace) -> StackConfig:
    try:
        values = resolve(args, UP_SETTINGS, ENV_PREFIX)
    except SettingsError as e:
        raise UsageError(str(e)) from None
    if values["engine"] not in ("local", "spark"):
        raise UsageError(f"--engine must be local or spark, got {values['engine']!r}")
    values.pop("timeout")
    if values["initial_load"] not in ("copy", "debezium"):
        raise UsageError(f"--initial-load must be copy or debezium, got {values['initial_load']!r}")
    storage = values.pop("kafka_storage")
    if storage not in ("s3", "memory"):
        raise UsageError(f"--kafka-storage must be s3 or memory, got {storage!r}")
    values["persistent_kafka"] = storage == "s3"
    values["dir"] = str(Path(values["dir"]).resolve())
    return StackConfig(**values)


def cmd_up(args: argparse.Namespace) -> int:
    config = _config(args)
    directory = config.root
    timeout = resolve(args, UP_SETTINGS, ENV_PREFIX)["timeout"]
    if _supervisor_pid(directory) is None:
        config.save()
        (directory / "logs").mkdir(parents=True, exist_ok=True)
        (directory / STATE_FILE).unlink(missing_ok=True)
        with open(directory / "logs" / "supervisor.log", "ab") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "inlet.services.cli.main",
                    "stack",
                    "supervise",
                    "--dir",
                    str(directory),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env={**os.environ, "INLET_LOG_FORMAT": "json", "INLET_LOG_LEVEL": "INFO"},
            )
        (directory / PID_FILE).write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    shown: set[str] = set()
    while True:
        state = _read_state(directory) or {}
        for c in state.get("components", []):
            if c.get("healthy") and c["name"] not in shown:
                shown.add(c["name"])
                print(f"inlet stack: {c['name']} is up (pid {c.get('pid')})", file=sys.stderr, flush=True)
        if state.get("state") == "running" and all(c.get("healthy") for c in state.get("components", [])):
            print(json.dumps(state["addresses"]), flush=True)
            return 0
        if state.get("state") in ("failed", "stopped") or _supervisor_pid(directory) is None:
            raise CliError(
                f"the stack did not start: {state.get('error') or 'supervisor exited'} "
                f"(logs in {directory / 'logs'})"
            )
        if time.monotonic() > deadline:
            raise CliError(f"the stack was not healthy after {timeout} s (logs in {directory / 'logs'})")
        time.sleep(0.5)


def cmd_down(args: argparse.Namespace) -> int:
    directory = _dir(args)
    pid = _supervisor_pid(directory)
    if pid is None:
        print(json.dumps({"event": "stopped", "dir": str(directory), "was_running": False}))
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 120
    while _supervisor_pid(directory) is not None:
        if time.monotonic() > deadline:
            raise CliError(f"the stack supervisor (pid {pid}) did not stop in 120 s")
        time.sleep(0.3)
    (directory / PID_FILE).unlink(missing_ok=True)
    print(json.dumps({"event": "stopped", "dir": str(directory), "was_running": True}))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    directory = _dir(args)
    state = _read_state(directory)
    running = _supervisor_pid(directory) is not None
    if state is None:
        state = {"state": "stopped", "components": []}
    if not running and state.get("state") not in ("failed",):
        state["state"] = "stopped"
    for c in state.get("components", []):  # tables a bad row stopped, as the service tells now
        if running and c.get("health") and c.get("alive"):
            stopped = stopped_tables(c["health"])
            if stopped:
                c["stopped_tables"] = stopped
    if args.json:
        print(json.dumps(state))
        return 0
    print(f"stack {directory}: {state['state']}" + (f" ({state['error']})" if state.get("error") else ""))
    for c in state.get("components", []):
        health = (
            "healthy" if c.get("healthy") and running else ("up" if c.get("alive") and running else "down")
        )
        print(f"  {c['name']:<14} pid {c.get('pid') or '-':<8} {health:<8} restarts {c.get('restarts', 0)}")
        for table, reason in sorted((c.get("stopped_tables") or {}).items()):
            print(f"    table {table} stopped: {reason}")
    return 0


def cmd_supervise(args: argparse.Namespace) -> int:
    directory = _dir(args)
    config = StackConfig.load(directory)
    if config is None:
        raise UsageError(f"no stack configuration in {directory} (run 'inlet stack up' first)")
    (directory / PID_FILE).write_text(str(os.getpid()))
    with StopSignal() as stop:
        return Stack(config).run(stop)


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def add_stack_commands(subparsers: Any) -> None:
    """Add ``stack up|down|status`` (and the internal ``supervise``) to the ``inlet`` command."""
    p = subparsers.add_parser(
        "stack",
        help="run the whole replication pipeline locally",
        description=DESCRIPTION,
        formatter_class=_formatter,
    )
    sub = p.add_subparsers(dest="stack_command", metavar="COMMAND", required=True)
    up = sub.add_parser(
        "up",
        help="start the stack (or report the running one) and print its addresses",
        description=DESCRIPTION,
        epilog=UP_EPILOG,
        formatter_class=_formatter,
    )
    add_arguments(up, UP_SETTINGS, ENV_PREFIX)
    up.set_defaults(handler=cmd_up)
    down = sub.add_parser("down", help="stop the stack; its data stays in --dir", formatter_class=_formatter)
    add_arguments(down, (DIR_SETTING,), ENV_PREFIX)
    down.set_defaults(handler=cmd_down)
    status = sub.add_parser(
        "status",
        help="each process, its pid and health; tables stopped by a bad row",
        formatter_class=_formatter,
    )
    add_arguments(status, (DIR_SETTING,), ENV_PREFIX)
    status.add_argument("--json", action="store_true", help="print the state as one JSON object")
    status.set_defaults(handler=cmd_status)
    supervise = sub.add_parser(
        "supervise", help="run the supervisor in the foreground (what up starts in the background)"
    )
    add_arguments(supervise, (DIR_SETTING,), ENV_PREFIX)
    supervise.set_defaults(handler=cmd_supervise)
