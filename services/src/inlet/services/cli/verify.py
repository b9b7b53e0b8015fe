"""``inlet verify``: compare replicated Hudi tables with their PostgreSQL source (and repair them).

The work is :mod:`inlet.services.verify`; this module is the command line: settings (flags and
``INLET_VERIFY_*`` variables), the report on stdout (text or ``--json``) and the exit status.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

from inlet.services.cli.commit import (
    CA_SETTING,
    COORDINATOR_TLS_SETTING,
    TOKEN_FILE_SETTING,
    TOKEN_SETTING,
    coordinator_token,
    read_ca,
)
from inlet.services.cli.dataio import json_safe
from inlet.services.cli.errors import CliError, UsageError
from inlet.services.cli.parsing import ArgumentParser, add_command
from inlet.services.runtime import Setting, SettingsError, add_arguments, resolve

ENV_PREFIX = "INLET_VERIFY_"
EXIT_EQUAL, EXIT_DIFFERENT, EXIT_ERROR = 0, 1, 2

SETTINGS: tuple[Setting, ...] = (
    Setting("source", "--source", "the source PostgreSQL (libpq URL)", required=True, metavar="URL"),
    Setting(
        "lake",
        "--lake",
        "the lake root the writer writes to: tables at <ROOT>/<database>/<schema>/<table>",
        required=True,
        metavar="ROOT",
    ),
    Setting(
        "tables",
        "--tables",
        "tables to verify, globs of SCHEMA.TABLE (repeatable or comma-separated)",
        kind="list",
        default=("public.*",),
        metavar="GLOB",
    ),
    Setting(
        "repair",
        "--repair",
        "make differing tables equal: one upsert commit per table of the source's rows of the "
        "differing keys, deleting the keys the source lacks",
        kind="bool",
        default=False,
    ),
    Setting("json", "--json", "print one JSON report on stdout instead of text", kind="bool", default=False),
    Setting(
        "chunk_rows",
        "--chunk-rows",
        "source rows per primary-key range chunk whose checksums are compared",
        kind="int",
        default=100_000,
        metavar="N",
    ),
    Setting(
        "rechecks",
        "--rechecks",
        "how many times differing keys are read again (changes may still be streaming)",
        kind="int",
        default=3,
        metavar="N",
    ),
    Setting(
        "recheck_wait",
        "--recheck-wait",
        "before each recheck, wait up to this long for the lake table to complete a commit",
        kind="float",
        default=2.0,
        metavar="S",
    ),
    Setting(
        "max_keys",
        "--max-keys",
        "differing keys shown per kind and table (the counts are always complete)",
        kind="int",
        default=1000,
        metavar="N",
    ),
    Setting(
        "progress",
        "--progress",
        "progress lines on stderr per table and chunk (--no-progress: none)",
        kind="bool",
        default=True,
    ),
    Setting(
        "coordinator",
        "--coordinator",
        "with --repair: commit through the commit coordinator at HOST:PORT (else through the table's "
        "own commit protocol, as a lone writer)",
        metavar="HOST:PORT",
    ),
    TOKEN_SETTING,
    TOKEN_FILE_SETTING,
    CA_SETTING,
    COORDINATOR_TLS_SETTING,
    Setting(
        "topic_prefix",
        "--topic-prefix",
        "Debezium's topic.prefix, for the coordinator's table id <prefix>.<schema>.<table> (default: "
        "from the lake rows' db_shard_source_partition)",
        metavar="PREFIX",
    ),
    Setting(
        "table_config",
        "--table-config",
        "the writer's per-table configuration (JSON): how --repair creates a missing table, its write options",
        metavar="FILE",
    ),
)

DESCRIPTION = """\
Verify that replicated Hudi tables equal their PostgreSQL source, and optionally repair them.

For each source table matching --tables, the lake table <ROOT>/<database>/<schema>/<table> is read
as a reader of the table sees it (Merge-on-Read logs merged, soft-deleted rows left out, Hudi's
_hoodie_* columns and the writer's Debezium columns ignored) and the source is read with the
initial load's rendering (the values exactly as the writer stores what Debezium sends). Rows are
hashed, checksummed per primary-key range chunk, and differing chunks compared row by row:

  missing    the key is in the source, not in the lake
  extra      the key is in the lake, not in the source
  different  both have the key, with different values
  duplicate  the lake holds the key more than once

Changes may still be streaming: differing keys are read again (--rechecks, each after waiting up to
--recheck-wait for the lake to complete a commit) and a key whose lake row caught up is not
reported. Tables without a primary key are compared as multisets of rows when the lake has them,
else skipped (the reason is printed).

--repair upserts the source's current rows of the differing keys and deletes the extra ones in one
commit per table (through --coordinator when given, else the table's own commit path), with
_event_lsn at the source's current WAL position so that later streamed changes still win. The
commit carries no Kafka checkpoint: the writer resumes from the newest commit that has one.

Output: per table the differing keys (KIND KEY lines) and a summary line with rows and rows/s;
--json prints one JSON document instead. Progress goes to stderr (--no-progress to silence).

exit status: 0 every table equal (or repaired), 1 some table differs, 2 bad arguments, an
unreachable source or a table that could not be read (one line on stderr).
"""

EPILOG = """\
examples:
  inlet verify --source postgresql://app@pg/app --lake /lake
  inlet verify --source postgresql://app@pg/app --lake s3://lake --tables 'public.orders*' --json
  inlet verify --source postgresql://app@pg/app --lake /lake --repair --coordinator coord:50551
"""


class VerifyError(CliError):
    """The verification could not run (exit 2)."""

    exit_code = EXIT_ERROR


def add_verify_commands(subparsers: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = add_command(
        subparsers,
        "verify",
        cmd_verify,
        "check that replicated tables equal their PostgreSQL source (--repair: make them equal)",
        DESCRIPTION,
    )
    p.epilog = EPILOG
    add_arguments(p, SETTINGS, ENV_PREFIX)


def _options(v: dict[str, Any]) -> Any:
    from inlet.services.verify.verifier import VerifyOptions
    from inlet.services.writer.tables import TableConfigError, load_rules

    for name in ("chunk_rows", "max_keys"):
        if v[name] < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if v["rechecks"] < 0:
        raise UsageError("--rechecks must be 0 or more")
    if v["recheck_wait"] < 0:
        raise UsageError("--recheck-wait must be 0 or more")
    if not v["coordinator"] and (
        v["coordinator_token"] or v["coordinator_token_file"] or v["coordinator_ca"]
    ):
        raise UsageError(
            "--coordinator-token, --coordinator-token-file and --coordinator-ca need --coordinator"
        )
    try:
        rules = load_rules(v["table_config"])
    except TableConfigError as e:
        raise UsageError(str(e)) from None
    return VerifyOptions(
        source_url=v["source"],
        lake_root=v["lake"],
        tables=tuple(v["tables"]),
        chunk_rows=v["chunk_rows"],
        rechecks=v["rechecks"],
        recheck_wait_s=v["recheck_wait"],
        max_keys=v["max_keys"],
        repair=bool(v["repair"]),
        topic_prefix=v["topic_prefix"],
        rules=tuple(rules),
    )


def _check_lake(root: str) -> None:
    from inlet.core.storage import Storage

    try:
        found = Storage(root).exists("")
    except (OSError, ValueError) as e:
        raise UsageError(f"--lake {root}: {e}") from None
    if not found:
        raise UsageError(f"--lake {root}: no such directory")


def cmd_verify(args: argparse.Namespace) -> int:
    import psycopg

    from inlet.services.verify.verifier import Verifier

    try:
        v = resolve(args, SETTINGS, ENV_PREFIX)
    except SettingsError as e:
        raise UsageError(str(e)) from None
    options = _options(v)
    _check_lake(options.lake_root)
    progress = logging.getLogger("inlet.verify.progress")
    if not v["progress"]:
        progress.setLevel(logging.WARNING)
    elif not progress.isEnabledFor(logging.INFO):
        progress.setLevel(logging.INFO)
    client = None
    if v["coordinator"]:
        from inlet.services.coordinator_client.client import CoordinatorClient

        client = CoordinatorClient(
            v["coordinator"],
            root_certificates=read_ca(v["coordinator_ca"]),
            token=coordinator_token(v),
            tls=bool(v["coordinator_tls"]),
        )
    started = time.monotonic()
    try:
        reports = Verifier(options, client).run()
    except psycopg.OperationalError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise VerifyError(f"--source: cannot reach the source database: {first}") from None
    except (psycopg.Error, OSError) as e:
        raise VerifyError(f"{type(e).__name__}: {e}") from None
    except Exception as e:  # exit 1 means "differs": any other failure is 2
        logging.getLogger("inlet.verify").debug("verify failed", exc_info=True)
        raise VerifyError(
            f"unexpected {type(e).__name__}: {e} (run with --log-level DEBUG for a traceback)"
        ) from None
    finally:
        if client is not None:
            client.close()
    seconds = round(time.monotonic() - started, 3)
    statuses = {r.status for r in reports}
    if "error" in statuses:
        code = EXIT_ERROR
    elif "different" in statuses:
        code = EXIT_DIFFERENT
    else:
        code = EXIT_EQUAL
    if v["json"]:
        doc = {
            "equal": code == EXIT_EQUAL,
            "seconds": seconds,
            "tables": [r.as_json() for r in reports],
        }
        sys.stdout.write(json.dumps(json_safe(doc)) + "\n")
    else:
        for r in reports:
            sys.stdout.write("".join(line + "\n" for line in text_lines(r)))
        counts = {
            s: sum(1 for r in reports if r.status == s)
            for s in ("equal", "repaired", "different", "skipped", "error")
        }
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no tables"
        sys.stdout.write(f"verify: {len(reports)} tables: {summary} ({seconds} s)\n")
    if code == EXIT_ERROR:
        failed = next(r for r in reports if r.status == "error")
        sys.stderr.write(f"inlet: error: {failed.table}: {failed.reason}\n")
    return code


def _key_text(key: dict[str, Any]) -> str:
    return ",".join(f"{k}={json.dumps(json_safe(v), ensure_ascii=False)}" for k, v in key.items())


def text_lines(r: Any) -> list[str]:
    """The text report of one table: its differing keys, notes, then the summary line."""
    lines: list[str] = []
    for kind, keys in r.keys.items():
        lines.extend(f"{r.table} {kind} {_key_text(k)}" for k in keys)
        more = r.counts[kind] - len(keys)
        if more > 0:
            lines.append(f"{r.table} {kind} ... {more} more (--max-keys)")
    if r.ignored_columns:
        lines.append(f"{r.table} note: not compared: " + "; ".join(r.ignored_columns.values()))
    if r.lake_only_columns:
        lines.append(f"{r.table} note: lake columns the source lacks: {', '.join(r.lake_only_columns)}")
    parts = [f"{r.table}: {r.status}"]
    if r.status in ("skipped", "error") or (r.reason and r.status == "different" and not r.source_rows):
        parts.append(str(r.reason))
    else:
        parts.append(f"source {r.source_rows} rows, lake {r.lake_rows} rows")
        found = ", ".join(f"{n} {k}" for k, n in r.counts.items() if n)
        if found:
            parts.append(found)
        parts.append(f"chunks {r.chunks} ({r.differing_chunks} differing), rechecks {r.rechecks}")
        if r.repair is not None:
            parts.append(
                f"repair {r.repair.instant}: {r.repair.upserted} upserted, {r.repair.deleted} deleted"
            )
        if r.reason:
            parts.append(str(r.reason))
    parts.append(f"{r.seconds} s, {r.rows_per_s:.0f} rows/s")
    return [*lines, "; ".join(parts)]
