"""``inlet stack up | down | status``: the whole replication pipeline on this machine.

``up`` starts a background supervisor (``inlet stack supervise``) and returns once every process is
healthy, printing one JSON line with the addresses; ``down`` stops it (everything, in reverse
order); ``status`` shows each process, its pid and health, and the tables the writer stopped on a
bad row with the reason (from its ``/readyz``). State and logs live in ``--dir``.
With ``--source URL`` the stack replicates the user's PostgreSQL (checked first by
:func:`inlet.services.stack.source.preflight`); ``status`` then shows the WAL its replication slot
holds, and ``down --drop-slot`` drops the slot and the publication.
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

import psycopg

from inlet.core.errors import InletError
from inlet.core.s3 import is_s3_uri, split_s3_uri
from inlet.services.cli.errors import CliError, UsageError
from inlet.services.cli.s3_options import add_s3_options
from inlet.services.extras import require
from inlet.services.kafka_topics import TOPIC_SETTINGS, TopicRetention
from inlet.services.runtime import Setting, SettingsError, StopSignal, add_arguments, resolve
from inlet.services.stack import source
from inlet.services.stack.components import stopped_tables
from inlet.services.stack.processes import StackError
from inlet.services.stack.supervisor import (
    CONFIG_FILE,
    INITIAL_LOAD_FILE,
    LOAD_PROGRESS_FILE,
    PID_FILE,
    STATE_FILE,
    Stack,
    StackConfig,
)
from inlet.services.writer.load_ranges import read_progress

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
    Setting(
        "source",
        "--source",
        "replicate this PostgreSQL (postgresql://USER:PASSWORD@HOST:PORT/DB; wal_level=logical, a role "
        "with REPLICATION and SELECT on the tables) instead of starting one; kept in DIR/config.json, so "
        "a later `up` reuses it",
        metavar="URL",
    ),
    Setting(
        "database",
        "--database",
        "the embedded source database, and Debezium's topic prefix (default app; with --source the "
        "URL's database)",
    ),
    Setting(
        "engine",
        "--engine",
        "local or spark: the engine of the writer, the initial load (spark: each CTID range a Spark task) "
        "and the table services' compactions (spark: one task per file group)",
        default="local",
        metavar="ENGINE",
    ),
    Setting(
        "spark_master",
        "--spark-master",
        "with --engine spark: local[N], or spark://HOST:PORT of a standalone cluster the writer, the "
        "initial load and the table services submit to, each as its own application (its executors "
        "must reach the source PostgreSQL and the lake)",
        default="local[2]",
        metavar="URL",
    ),
    Setting("buckets", "--buckets", "bucket-index buckets of new tables", kind="int", default=4, metavar="N"),
    Setting(
        "batch_interval_ms",
        "--batch-interval-ms",
        "longest a change waits in the writer before its commit",
        kind="int",
        default=1000,
        metavar="MS",
    ),
    *TOPIC_SETTINGS,
    Setting(
        "lake",
        "--lake",
        "where the tables go: local (DIR/lake), s3 (bucket `lake` of the stack's own SeaweedFS; the JSON "
        "line reports its endpoint and credentials under s3) or s3://BUCKET/PREFIX of an external store "
        "(endpoint and credentials from AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
        "AWS_REGION, INLET_S3_PATH_STYLE); kept in DIR/config.json (default local)",
        metavar="local|s3|URI",
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
        "debezium_schemas",
        "--debezium-schemas",
        "Debezium writes JSON with each event's schema inline (default). --no-debezium-schemas: values "
        "only (~1/6 of the bytes, a quarter less Debezium CPU per change), the CDC consumer reads column types "
        "from the source catalog - only for tables whose column types never change (ALTER COLUMN ... "
        "TYPE) while changes are in flight: those would decode with the new type",
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
PostgreSQL (wal_level=logical) -> Debezium (Kafka Connect) -> Apache Kafka (KRaft, its data under
DIR/kafka; the topics keep --topic-retention-ms / --topic-retention-bytes) -> CDC consumer -> writer -> Hudi tables under DIR/lake/<db>/<schema>/<table> (--lake s3:
s3://lake/... in the stack's S3 store; --lake s3://BUCKET/PREFIX: an external store), committed
through the commit coordinator, compacted and cleaned by the table-services service, registered
in a Hive Metastore by catalog sync (database <db>_<schema>). A process that dies is restarted (logs/supervisor.log says so).
With --source the stack replicates that PostgreSQL instead (checked first: wal_level, the role's
REPLICATION and SELECT, a free slot) through slot and publication inlet_<dir name>_<hash>, and its own
PostgreSQL only keeps the coordinator's state.
"""

UP_EPILOG = """\
examples:
  inlet stack up --dir /tmp/stack                 # prints {"postgres": ..., "kafka": ..., ...}
  psql "$(inlet stack status --dir /tmp/stack --json | jq -r .addresses.postgres.url)"
  inlet stack down --dir /tmp/stack               # a later `up` resumes where it stopped
  inlet stack up --dir /tmp/shop --source postgresql://inlet:PW@db:5432/shop   # your PostgreSQL
  inlet stack down --dir /tmp/shop --drop-slot    # and drop its slot + publication on the source
  inlet stack up --dir /tmp/s3 --lake s3          # tables in its SeaweedFS: {"lake": "s3://lake", "s3": {...}}
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


def check_lake(lake: str) -> None:
    """A one-line UsageError unless ``lake`` is local, s3 or an s3://BUCKET/PREFIX URI."""
    if lake in ("local", "s3"):
        return
    if not is_s3_uri(lake):
        raise UsageError(f"--lake must be local, s3 or an s3://BUCKET/PREFIX URI, got {lake!r}")
    try:
        split_s3_uri(lake)
    except InletError as e:
        raise UsageError(str(e)) from None


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
    try:
        TopicRetention.from_settings(values)
    except ValueError as e:
        raise UsageError(str(e)) from None
    values["dir"] = str(Path(values["dir"]).resolve())
    saved = StackConfig.load(Path(values["dir"])) if (Path(values["dir"]) / CONFIG_FILE).exists() else None
    if saved is not None:
        if values["source"] is None:
            values["source"] = saved.source  # a later `up` repeats the saved source
        elif saved.source is None:
            raise UsageError(
                f"{values['dir']} holds a stack of its own PostgreSQL; use another --dir for --source"
            )
        elif not source.same_source(saved.source, values["source"]):
            raise UsageError(
                f"{values['dir']} replicates {source.mask_url(saved.source)}, not "
                f"{source.mask_url(values['source'])}; use another --dir for another source"
            )
    lake = values["lake"]
    if lake is not None:
        check_lake(lake)
    if saved is not None and lake is not None and lake != saved.lake:
        raise UsageError(f"{values['dir']} keeps its lake at {saved.lake}, not {lake}; use another --dir")
    values["lake"] = lake or (saved.lake if saved is not None else "local")
    if values["database"] is None:
        values["database"] = source.database_of(values["source"]) if values["source"] else "app"
    return StackConfig(**values)


def _preflight(config: StackConfig) -> None:
    """Check the ``--source`` server before anything starts: the first problem is the error."""
    if not config.source:
        return
    name = config.replication_name
    assert name is not None
    check = source.preflight(config.source, config.tables, name)
    for warning in check.warnings:
        print(f"inlet stack: warning: {warning}", file=sys.stderr, flush=True)
    if check.problems:
        raise CliError(check.problems[0])


def cmd_up(args: argparse.Namespace) -> int:
    require("stack", "inlet stack up")
    config = _config(args)
    directory = config.root
    timeout = resolve(args, UP_SETTINGS, ENV_PREFIX)["timeout"]
    if _supervisor_pid(directory) is None:
        _preflight(config)
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
    config = StackConfig.load(directory)
    name = config.replication_name if config is not None else None
    if args.drop_slot and name is None:
        raise UsageError(f"--drop-slot is for a stack started with --source; {directory} has none")
    pid = _supervisor_pid(directory)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 120
        while _supervisor_pid(directory) is not None:
            if time.monotonic() > deadline:
                raise CliError(f"the stack supervisor (pid {pid}) did not stop in 120 s")
            time.sleep(0.3)
        (directory / PID_FILE).unlink(missing_ok=True)
    out: dict[str, Any] = {"event": "stopped", "dir": str(directory), "was_running": pid is not None}
    if args.drop_slot:
        assert config is not None and config.source and name
        try:
            out.update(slot=name, **source.drop_replication(config.source, name))
            # the changes made from now on are in no slot: a later `up` loads the tables anew
            # (Debezium's offsets point into the dropped slot's stream)
            (directory / "debezium" / "offsets.dat").unlink(missing_ok=True)
            (directory / INITIAL_LOAD_FILE).unlink(missing_ok=True)
        except psycopg.Error as e:
            raise CliError(
                f"cannot drop slot {name} on {source.mask_url(config.source)}: {str(e).strip().splitlines()[0]}"
            ) from None
        except StackError as e:
            raise CliError(str(e)) from None
    print(json.dumps(out))
    return 0


def _source_status(config: StackConfig | None, running: bool) -> dict[str, Any] | None:
    """The --source stack's slot on the source: exists, active, the WAL it holds back."""
    if config is None or not config.source or config.replication_name is None:
        return None
    out: dict[str, Any] = {"url": source.mask_url(config.source), "slot": config.replication_name}
    try:
        slot = source.slot_state(config.source, config.replication_name)
    except psycopg.Error as e:
        out["error"] = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return out
    out.update(
        slot_exists=slot.exists,
        active=slot.active,
        retained_wal_bytes=slot.retained_wal_bytes,
        holds_wal_while_stopped=slot.exists and not running,
    )
    return out


def _existing_stack(directory: Path) -> None:
    """A one-line error (exit 1) for a directory that holds no stack."""
    if _read_state(directory) is None and StackConfig.load(directory) is None:
        raise CliError(f"no stack in {directory} (`inlet stack up --dir {directory}` starts one)")


def cmd_status(args: argparse.Namespace) -> int:
    directory = _dir(args)
    _existing_stack(directory)
    state = _read_state(directory)
    running = _supervisor_pid(directory) is not None
    if state is None:
        state = {"state": "stopped", "components": []}
    if not running and state.get("state") not in ("failed",):
        state["state"] = "stopped"
    src = _source_status(StackConfig.load(directory), running)
    if src is not None:
        state["source"] = src
    load = read_progress(directory / LOAD_PROGRESS_FILE)
    if load:
        state["initial_load"] = load
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
        data = f" data {c['data']}" if c.get("data") else ""  # the broker's log directory
        print(
            f"  {c['name']:<17} pid {c.get('pid') or '-':<8} {health:<8} restarts {c.get('restarts', 0)}{data}"
        )
        for table, reason in sorted((c.get("stopped_tables") or {}).items()):
            print(f"    table {table} stopped: {reason}")
    for table, p in sorted(load.items()):
        print(f"  initial load {table}: {_load_line(p)}")
    if src is not None:
        print(f"  source {src['url']}, slot {src['slot']}: ", end="")
        if "error" in src:
            print(f"cannot read it ({src['error']})")
        elif not src["slot_exists"]:
            print("no slot")
        else:
            print(
                f"{'active' if src['active'] else 'inactive'}, retains {src['retained_wal_bytes']} bytes of WAL"
            )
            if src["holds_wal_while_stopped"]:
                print(
                    f"  the stack is stopped but slot {src['slot']} holds {src['retained_wal_bytes']} bytes "
                    "of WAL on the source, growing with every change: `inlet stack up` resumes, "
                    "`inlet stack down --drop-slot` drops it"
                )
    return 0


def _load_line(p: dict[str, Any]) -> str:
    """One table's initial-load progress, as ``stack status`` prints it."""
    if p.get("state") == "skipped":
        return f"left to Debezium's snapshot ({p.get('reason', '')})"
    line = f"{p.get('state')}, {p.get('rows', 0)} rows, {p.get('rows_per_s', 0)} rows/s"
    line += f", {p.get('pages_done', 0)}/{p.get('pages', 0)} pages"
    if p.get("state") == "loading":
        eta = p.get("eta_s")
        line += f", ETA {'unknown' if eta is None else f'{eta:.0f} s'}"
    return line


def cmd_supervise(args: argparse.Namespace) -> int:
    require("stack", "inlet stack")
    directory = _dir(args)
    config = StackConfig.load(directory)
    if config is None:
        raise UsageError(f"no stack configuration in {directory} (run 'inlet stack up' first)")
    (directory / PID_FILE).write_text(str(os.getpid()))
    with StopSignal() as stop:
        return Stack(config).run(stop)


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def cmd_logs(args: argparse.Namespace) -> int:
    """The last ``--lines`` lines of a process's log, or the processes that have one."""
    directory = _dir(args)
    _existing_stack(directory)
    logs = directory / "logs"
    names = sorted(p.stem for p in logs.glob("*.log")) if logs.is_dir() else []
    if args.service is None:
        print("\n".join(names) if names else f"no logs in {logs} yet")
        return 0
    path = logs / f"{args.service}.log"
    if not path.is_file():
        raise UsageError(f"no log of {args.service!r} in {logs}; the logs are: {', '.join(names) or 'none'}")
    with path.open("rb") as f:  # the tail without reading a large log whole
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - 256 * 1024))
        lines = f.read().decode("utf-8", "replace").splitlines()
    sys.stdout.write("\n".join(lines[-args.lines :]) + "\n" if lines else "")
    return 0


def add_stack_commands(subparsers: Any) -> None:
    """Add ``stack up|down|status|logs`` (and the internal ``supervise``) to the ``inlet`` command."""
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
    add_s3_options(up, suppress=True)  # an external --lake s3://...: its endpoint, for every component
    up.set_defaults(handler=cmd_up)
    down = sub.add_parser("down", help="stop the stack; its data stays in --dir", formatter_class=_formatter)
    add_arguments(down, (DIR_SETTING,), ENV_PREFIX)
    down.add_argument(
        "--drop-slot",
        action="store_true",
        help="then drop the --source stack's replication slot and publication on the source, so it "
        "holds no WAL for it (a later `up` loads the tables anew)",
    )
    down.set_defaults(handler=cmd_down)
    status = sub.add_parser(
        "status",
        help="each process, its pid and health; tables stopped by a bad row",
        formatter_class=_formatter,
    )
    add_arguments(status, (DIR_SETTING,), ENV_PREFIX)
    status.add_argument("--json", action="store_true", help="print the state as one JSON object")
    status.set_defaults(handler=cmd_status)
    logs = sub.add_parser(
        "logs",
        help="the last lines of a process's log (logs/<process>.log); without SERVICE, the processes",
        formatter_class=_formatter,
    )
    add_arguments(logs, (DIR_SETTING,), ENV_PREFIX)
    logs.add_argument("service", nargs="?", metavar="SERVICE", help="e.g. writer, cdc_consumer, kafka")
    logs.add_argument("-n", "--lines", type=int, default=50, help="how many lines (default 50)")
    logs.set_defaults(handler=cmd_logs)
    supervise = sub.add_parser(
        "supervise", help="run the supervisor in the foreground (what up starts in the background)"
    )
    add_arguments(supervise, (DIR_SETTING,), ENV_PREFIX)
    supervise.set_defaults(handler=cmd_supervise)
