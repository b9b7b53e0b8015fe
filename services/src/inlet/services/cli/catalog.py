"""``inlet catalog sync|run`` and ``inlet metastore serve``: Hive Metastore catalog sync.

``inlet catalog sync PATH --metastore thrift://HOST:PORT`` registers one table once, as Apache Hudi's
HiveSyncTool does, and prints what it changed as one JSON object. ``inlet catalog run`` is the service that
keeps the metastore in step with the coordinator's commit events on ``inlet.commits``.
``inlet metastore serve --dir DIR`` runs the embedded Hive Metastore (Hive 2.3 from PySpark's jars, Derby
under DIR) on a loopback address until SIGTERM/SIGINT.

Every option also comes from an ``INLET_CATALOG_*`` (``INLET_METASTORE_*``) variable named in ``--help``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
from typing import Any

from inlet.services.cli.errors import CliError, UsageError
from inlet.services.cli.options import parse_key_values
from inlet.services.commit_events import follower_settings
from inlet.services.runtime import (
    Setting,
    SettingsError,
    StopSignal,
    add_arguments,
    announce,
    resolve,
    run_until_stopped,
    split_listen,
)

_log = logging.getLogger("inlet.catalog")

CATALOG_ENV = "INLET_CATALOG_"
METASTORE_ENV = "INLET_METASTORE_"

# the client's side of a secured metastore (Hive's hive.metastore.use.SSL, hive.metastore.sasl.enabled,
# Hive 4's metastore.authentication); see docs/catalog.md
SECURITY_SETTINGS = (
    Setting(
        "metastore_tls",
        "--metastore-tls",
        "use TLS to the metastore (hive.metastore.use.SSL=true) with the system's trusted CAs",
        kind="bool",
        default=False,
    ),
    Setting(
        "metastore_ca",
        "--metastore-ca",
        "PEM file of the CA that signed the metastore's certificate (turns TLS on)",
        metavar="FILE",
    ),
    Setting(
        "metastore_cert",
        "--metastore-cert",
        "PEM client certificate for a metastore that asks for one (with TLS)",
        metavar="FILE",
    ),
    Setting(
        "metastore_key",
        "--metastore-key",
        "private key of --metastore-cert (default: in that file)",
        metavar="FILE",
    ),
    Setting(
        "metastore_sasl",
        "--metastore-sasl",
        "SASL on the metastore connection: none; kerberos (GSSAPI, hive.metastore.sasl.enabled=true; "
        "credentials from the ticket cache or KRB5_CLIENT_KTNAME); plain (user and password, Hive 4's "
        "metastore.authentication=LDAP|CONFIG)",
        default="none",
        metavar="none|kerberos|plain",
    ),
    Setting(
        "metastore_kerberos_service_name",
        "--metastore-kerberos-service-name",
        "service of the metastore's Kerberos principal SERVICE/_HOST@REALM",
        default="hive",
        metavar="NAME",
    ),
    Setting(
        "metastore_kerberos_host",
        "--metastore-kerberos-host",
        "host of the metastore's Kerberos principal, the _HOST (default: the --metastore URI's host)",
        metavar="HOST",
    ),
    Setting("metastore_user", "--metastore-user", "user for --metastore-sasl plain", metavar="USER"),
    Setting(
        "metastore_password_file",
        "--metastore-password-file",
        "file holding the password for --metastore-sasl plain (e.g. a mounted Secret), read at start",
        metavar="FILE",
    ),
)

SYNC_SETTINGS = (
    Setting("metastore", "--metastore", "metastore URI, thrift://HOST:PORT", metavar="URI", required=True),
    Setting(
        "database",
        "--database",
        "metastore database (default: the table's hoodie.database.name, else default)",
    ),
    Setting(
        "table", "--table", "metastore table name (default: the table's hoodie.table.name)", metavar="NAME"
    ),
    Setting(
        "option",
        "--option",
        "Hudi sync option KEY=VALUE (hoodie.datasource.hive_sync.*, hoodie.meta.sync.*); repeatable",
        kind="pairs",
        metavar="KEY=VALUE",
        env_name="OPTIONS",
    ),
    Setting("timeout", "--timeout", "seconds to wait for one metastore call", kind="float", default=60.0),
    *SECURITY_SETTINGS,
)

RUN_SETTINGS = (
    *follower_settings("inlet-catalog-sync", "sync", "metastore retries"),
    Setting("metastore", "--metastore", "metastore URI, thrift://HOST:PORT", metavar="URI", required=True),
    Setting(
        "database",
        "--database",
        "metastore database for every table (default: the table id's prefix before its last '.', else default)",
    ),
    Setting(
        "option",
        "--option",
        "Hudi sync option KEY=VALUE for every table; repeatable",
        kind="pairs",
        metavar="KEY=VALUE",
        env_name="OPTIONS",
    ),
    Setting("timeout", "--timeout", "seconds to wait for one metastore call", kind="float", default=60.0),
    *SECURITY_SETTINGS,
)

SERVE_SETTINGS = (
    Setting(
        "dir",
        "--dir",
        "directory of the warehouse, logs and (without --database-url) the PostgreSQL of the catalog",
        required=True,
        metavar="DIR",
    ),
    Setting(
        "listen", "--listen", "loopback HOST:PORT to serve on", default="127.0.0.1:9083", metavar="HOST:PORT"
    ),
    Setting(
        "database_url",
        "--database-url",
        "PostgreSQL database of the catalog (created if missing); default: an embedded PostgreSQL under --dir",
        metavar="postgresql://USER@HOST:PORT/DB",
    ),
)


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def _resolve(args: argparse.Namespace, settings: tuple[Setting, ...], prefix: str) -> dict[str, Any]:
    try:
        return resolve(args, settings, prefix)
    except SettingsError as e:
        raise UsageError(str(e)) from None


def metastore_security(s: dict[str, Any]) -> Any:
    """The :class:`MetastoreSecurity` of resolved settings; a one-line error for a bad combination."""
    from inlet.services.catalog_sync import CatalogSyncError
    from inlet.services.catalog_sync.transport import MetastoreSecurity

    password = None
    if s["metastore_password_file"]:
        path = s["metastore_password_file"]
        try:
            with open(path, encoding="utf-8") as f:
                password = f.read().strip("\r\n")
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(
                f"--metastore-password-file: cannot read {path}: {getattr(e, 'strerror', None) or e}"
            ) from None
    try:
        return MetastoreSecurity(
            tls=bool(s["metastore_tls"]),
            ca=s["metastore_ca"] or None,
            cert=s["metastore_cert"] or None,
            key=s["metastore_key"] or None,
            sasl=(s["metastore_sasl"] or "none").lower(),
            kerberos_service=s["metastore_kerberos_service_name"] or "hive",
            kerberos_host=s["metastore_kerberos_host"] or None,
            user=s["metastore_user"] or None,
            password=password,
        )
    except CatalogSyncError as e:
        raise UsageError(str(e)) from None


def add_catalog_commands(subparsers: Any) -> None:
    """Add ``catalog sync``, ``catalog run`` and ``metastore serve`` to the ``inlet`` command."""
    p = subparsers.add_parser(
        "catalog",
        help="register tables in a Hive Metastore (as Hudi's HiveSyncTool does)",
        description="Hive Metastore catalog sync.",
        formatter_class=_formatter,
    )
    sub = p.add_subparsers(dest="catalog_command", metavar="COMMAND", required=True)
    sync_p = sub.add_parser(
        "sync",
        help="sync one table once; prints what changed as JSON",
        description=(
            "Register the Hudi table at PATH in a Hive Metastore as Apache Hudi's HiveSyncTool (HMS mode) does:\n"
            "Copy-on-Write -> <table>; Merge-on-Read -> <table>_ro, <table>_rt and <table>; partitions added,\n"
            "re-pointed and dropped incrementally from last_commit_time_sync; new columns with CASCADE."
        ),
        epilog=(
            "example:\n  inlet catalog sync /lake/trips --metastore thrift://127.0.0.1:9083 --database sales \\\n"
            "      --option hoodie.datasource.hive_sync.support_timestamp=true"
        ),
        formatter_class=_formatter,
    )
    sync_p.add_argument("path", metavar="PATH", help="table base path")
    add_arguments(sync_p, SYNC_SETTINGS, CATALOG_ENV)
    sync_p.set_defaults(handler=cmd_sync)

    run_p = sub.add_parser(
        "run",
        help="the catalog sync service: follow inlet.commits until SIGTERM/SIGINT",
        description=(
            "Consume the coordinator's CommitEvents and sync every changed table (one sync per table per\n"
            "--coalesce seconds at most). Retries through a metastore outage; offsets are committed only after\n"
            "the tables they announce are synced. Prints one JSON line when serving."
        ),
        formatter_class=_formatter,
    )
    add_arguments(run_p, RUN_SETTINGS, CATALOG_ENV)
    run_p.set_defaults(handler=cmd_run)

    m = subparsers.add_parser(
        "metastore",
        help="run the embedded Hive Metastore (development)",
        description="The embedded Hive Metastore.",
        formatter_class=_formatter,
    )
    msub = m.add_subparsers(dest="metastore_command", metavar="COMMAND", required=True)
    serve_p = msub.add_parser(
        "serve",
        help="serve Hive Metastore 4 (PostgreSQL-backed) on a loopback address until SIGTERM/SIGINT",
        description=(
            "Apache Hive's standalone metastore 4, its catalog in PostgreSQL (--database-url, or an embedded\n"
            "PostgreSQL under --dir), the warehouse under --dir, Thrift API on a loopback address only.\n"
            "Prints one JSON line when serving."
        ),
        formatter_class=_formatter,
    )
    add_arguments(serve_p, SERVE_SETTINGS, METASTORE_ENV)
    serve_p.set_defaults(handler=cmd_serve)


def cmd_sync(args: argparse.Namespace) -> int:
    from inlet.core import InletError
    from inlet.services.catalog_sync import CatalogSyncError, MetastoreClient, sync_table

    s = _resolve(args, SYNC_SETTINGS, CATALOG_ENV)
    options = parse_key_values(s["option"], "--option")
    try:
        with MetastoreClient(s["metastore"], s["timeout"], metastore_security(s)) as client:
            report = sync_table(args.path, client, database=s["database"], table=s["table"], options=options)
    except (CatalogSyncError, InletError) as e:
        raise CliError(str(e)) from None
    print(json.dumps(report.to_dict()), flush=True)
    return 0


def config_from_args(args: argparse.Namespace) -> tuple[Any, str]:
    """The catalog sync service's config and its ``--metrics-listen`` address."""
    from inlet.services.catalog_sync.service import ServiceConfig

    s = _resolve(args, RUN_SETTINGS, CATALOG_ENV)
    config = ServiceConfig(
        bootstrap=s["bootstrap"],
        metastore=s["metastore"],
        topic=s["topic"],
        group=s["group"],
        database=s["database"],
        options=parse_key_values(s["option"], "--option"),
        coalesce_s=s["coalesce"],
        retry_max_s=s["retry_max"],
        metastore_timeout_s=s["timeout"],
        kafka=dict(parse_key_values(s["kafka"], "--kafka-option")),
        metastore_security=metastore_security(s),
    )
    return config, s["metrics_listen"]


def cmd_run(args: argparse.Namespace) -> int:
    from inlet.services.catalog_sync.service import CatalogSyncService

    config, listen = config_from_args(args)
    service = CatalogSyncService(config)
    return run_until_stopped(
        service.run,
        listen,
        service.metrics.registry,
        service.health,
        service="catalog-sync",
        topic=config.topic,
        metastore=config.metastore,
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from inlet.services.extras import require
    from inlet.services.stack.metastore import EmbeddedMetastore
    from inlet.services.stack.postgres import EmbeddedPostgres
    from inlet.services.stack.processes import StackError

    s = _resolve(args, SERVE_SETTINGS, METASTORE_ENV)
    try:
        host, port = split_listen(s["listen"])
    except SettingsError as e:
        raise UsageError(str(e)) from None
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise UsageError(
            f"--listen {s['listen']}: the embedded metastore has no authentication; serve on loopback"
        )
    if not s["database_url"]:
        require("stack", "inlet metastore serve without --database-url")  # the embedded PostgreSQL
    pg = None if s["database_url"] else EmbeddedPostgres(Path(s["dir"]) / "postgres")
    with StopSignal() as stop, contextlib.ExitStack() as running:
        try:
            database_url = s["database_url"]
            if pg is not None:
                running.enter_context(pg)
                database_url = pg.url("metastore")
            hms = EmbeddedMetastore(
                s["dir"],
                database_url=database_url,
                port=port,
                host="127.0.0.1" if host == "localhost" else host,
            )
            running.enter_context(hms)
        except StackError as e:
            raise CliError(str(e)) from None
        announce(service="metastore", address=hms.address, uri=hms.uri, dir=str(hms.data_dir), pid=hms.pid)
        while not stop.wait(0.5):
            if not hms.is_running:
                raise CliError(f"the metastore exited; see {hms.log_path}")
    return 0
