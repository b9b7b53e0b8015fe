"""``inlet cdc run``: the CDC consumer service, Debezium topics -> ``inlet.changes.<table>``, until SIGTERM/SIGINT.

Every flag also comes from an ``INLET_CDC_*`` variable (named in ``--help``); a flag wins. Once it
consumes it prints one JSON line on stdout, ``{"event": "serving", "metrics": "HOST:PORT", ...}``;
logs go to stderr. SIGTERM stops consuming, waits for the broker to acknowledge what was produced,
commits and exits 0.

Also runnable alone: ``python -m inlet.services.cli.cdc_run ...``.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence
from typing import Any

from inlet.services.cli.errors import CliError, UsageError
from inlet.services.runtime import SettingsError, StopSignal, add_arguments, announce, resolve

DESCRIPTION = """\
Consume Debezium PostgreSQL change topics (JSON with or without schemas, or Avro with a schema
registry) and publish Inlet's typed change events: each data change to
<output prefix>.<table id> keyed by its record key; each transaction END (and TRUNCATE) to every
partition of that table's topic; each record that cannot be decoded, or whose output the producer
refuses for good (larger than message.max.bytes, or refused by the broker), unchanged, to the
dead-letter topic with inlet-dlq-* headers giving the reason. Source offsets are committed only after the
broker acknowledged everything derived from them (at least once; the writer drops duplicates).

/metrics (Prometheus) and /healthz are served on --metrics-listen.
"""

EPILOG = """\
examples:
  inlet cdc run --kafka-bootstrap kafka:9092 --topic-pattern '^dbserver1\\.' --metrics-listen 0.0.0.0:9464
  INLET_CDC_KAFKA_BOOTSTRAP=kafka:9092 INLET_CDC_TOPICS=dbserver1.public.customers,dbserver1.transaction inlet cdc run
  inlet dlq show --kafka-bootstrap kafka:9092         # the records that went to the dead letters
"""


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def add_run_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``run`` to the ``cdc`` command's subparsers."""
    from inlet.services.cdc_consumer.settings import ENV_PREFIX, SETTINGS

    p: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="run the CDC consumer service until SIGTERM/SIGINT",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_formatter,
    )
    add_arguments(p, SETTINGS, ENV_PREFIX)
    p.set_defaults(handler=cmd_run)
    return p


def cmd_run(args: argparse.Namespace) -> int:
    from inlet.services.cdc_consumer.service import CdcConsumerService, CdcServiceError
    from inlet.services.cdc_consumer.settings import ENV_PREFIX, SETTINGS, CdcConfig

    try:
        config = CdcConfig.from_settings(resolve(args, SETTINGS, ENV_PREFIX))
    except SettingsError as e:
        raise UsageError(str(e)) from None
    with StopSignal() as stop:
        service = CdcConsumerService(config)
        done = threading.Event()

        def announce_when_ready() -> None:
            while not service.ready.wait(0.1):
                if done.is_set():
                    return
            announce(metrics=service.metrics_address, group=config.group, subscription=config.subscription)

        thread = threading.Thread(target=announce_when_ready, daemon=True)
        thread.start()
        try:
            service.run(stop.event)
        except CdcServiceError as e:
            raise CliError(str(e)) from None
        finally:
            done.set()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m inlet.services.cli.cdc_run ...`` (the same as ``inlet cdc run ...``)."""
    from inlet.services import logs

    parser = argparse.ArgumentParser(
        prog="inlet cdc run", description=DESCRIPTION, epilog=EPILOG, formatter_class=_formatter
    )
    from inlet.services.cdc_consumer.settings import ENV_PREFIX, SETTINGS

    add_arguments(parser, SETTINGS, ENV_PREFIX)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logs.configure()
    try:
        return cmd_run(args)
    except CliError as e:
        sys.stderr.write(f"inlet: error: {e}\n")
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
