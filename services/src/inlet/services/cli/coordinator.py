"""``inlet coordinator serve``: run the commit coordinator (gRPC) until SIGTERM/SIGINT.

Every flag also comes from an ``INLET_COORDINATOR_*`` environment variable (named in ``--help``);
a flag wins over its variable. On start it prints one JSON line on stdout,
``{"event": "serving", "address": "HOST:PORT", "metrics": "HOST:PORT", ...}`` (``metrics``: where
/metrics, /livez and /readyz are served, see docs/metrics.md); logs go to stderr.

Also runnable alone: ``python -m inlet.services.cli.coordinator serve ...``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from inlet.services.cli.errors import CliError, UsageError
from inlet.services.cli.s3_options import add_s3_options
from inlet.services.coordinator.config import ENV_PREFIX, SETTINGS, ConfigError, CoordinatorConfig
from inlet.services.runtime import StopSignal, add_arguments, announce

DESCRIPTION = """\
The commit coordinator: a gRPC service that hands out instant times, serialises commits,
detects conflicts (OCC) or orders non-blocking writers (NBCC), keeps writers' heartbeats (the
janitor rolls back writes whose writer died), leases table locks with fencing tokens, and records
every completed instant in an outbox that a publisher sends to Kafka (topic inlet.commits).

Its state lives in PostgreSQL: a restart loses nothing, and several coordinators may serve the
same tables. TLS and token authentication are required, except with --insecure on a loopback
address (local development).
"""

EPILOG = """\
example:
  inlet coordinator serve --listen 0.0.0.0:50551 --database-url postgresql://inlet@db/inlet \\
      --kafka-bootstrap kafka:9092 --lake-root /lake --tls-cert server.pem --tls-key server.key \\
      --tokens tokens.json
  inlet coordinator serve --insecure --listen 127.0.0.1:50551 --database-url ... --lake-root /tmp/lake

tokens file (JSON): {"tokens": [{"name": "cdc", "token": "<secret>", "tables": ["sales.*"]}]}
"""


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    add_arguments(p, SETTINGS, ENV_PREFIX)


def add_coordinator_commands(subparsers: Any) -> None:
    """Add ``coordinator serve`` to the ``inlet`` command's subparsers."""
    p = subparsers.add_parser(
        "coordinator",
        help="run the commit coordinator (gRPC)",
        description="The commit coordinator service.",
        formatter_class=_formatter,
    )
    sub = p.add_subparsers(dest="coordinator_command", metavar="COMMAND", required=True)
    serve_p = sub.add_parser(
        "serve",
        help="serve the coordinator until SIGTERM/SIGINT",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_formatter,
    )
    add_serve_arguments(serve_p)
    add_s3_options(serve_p, suppress=True)
    serve_p.set_defaults(handler=cmd_serve)


def config_from_args(args: argparse.Namespace) -> CoordinatorConfig:
    try:
        config = CoordinatorConfig.from_args(args)
        config.validate()
    except ConfigError as e:
        raise UsageError(str(e)) from None
    return config


def cmd_serve(args: argparse.Namespace) -> int:
    from inlet.services.coordinator.auth import TokenError
    from inlet.services.coordinator.errors import CoordinatorError
    from inlet.services.coordinator.server import serve

    config = config_from_args(args)
    try:
        running = serve(config)
    except (ConfigError, TokenError) as e:
        raise UsageError(str(e)) from None
    except CoordinatorError as e:  # e.g. the database is unreachable
        raise CliError(e.message) from None
    with StopSignal() as stop:
        try:
            announce(address=running.address, tls=bool(config.tls_cert), metrics=running.metrics_address)
            while not stop.wait(0.5):
                pass
        finally:
            running.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m inlet.services.cli.coordinator serve ...`` (the same as ``inlet coordinator serve``)."""
    from inlet.services import logs
    from inlet.services.cli.parsing import ArgumentParser

    parser = ArgumentParser(prog="inlet", formatter_class=_formatter)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_coordinator_commands(subparsers)
    try:
        args = parser.parse_args(["coordinator", *(sys.argv[1:] if argv is None else argv)])
        logs.configure()
        return int(args.handler(args))
    except CliError as e:
        sys.stderr.write(f"inlet: error: {e}\n")
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
