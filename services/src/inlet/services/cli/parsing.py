"""The ``inlet`` command line's parser pieces, shared by every command group's module."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn

from inlet.services import logs
from inlet.services.cli.errors import UsageError
from inlet.services.cli.options import TABLE_PATH_ENV, choice, choices_metavar, with_env
from inlet.services.cli.s3_options import add_s3_options


class ArgumentParser(argparse.ArgumentParser):
    """Reports bad arguments as one ``inlet: error:`` line (raised, so main() prints it)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


Handler = Callable[[argparse.Namespace], int]


def formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def common_options(suppress: bool) -> ArgumentParser:
    """Logging options, accepted before or after the command name."""
    default = argparse.SUPPRESS if suppress else None
    p = ArgumentParser(add_help=False)
    g = p.add_argument_group("logging")
    g.add_argument(
        "--log-level",
        type=choice(logs.LEVELS),
        metavar=choices_metavar(logs.LEVELS),
        default=default,
        help=with_env("log level on stderr (default WARNING)", logs.LOG_LEVEL_ENV),
    )
    g.add_argument(
        "--log-format",
        type=choice(logs.FORMATS),
        metavar=choices_metavar(logs.FORMATS),
        default=default,
        help=with_env("log format on stderr: text or JSON lines (default text)", logs.LOG_FORMAT_ENV),
    )
    g.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS if suppress else 0,
        help="log progress (INFO); twice for DEBUG. --log-level wins over it",
    )
    add_s3_options(p, suppress)
    return p


def add_command(
    subparsers: argparse._SubParsersAction[ArgumentParser],
    name: str,
    handler: Handler,
    summary: str,
    description: str,
) -> ArgumentParser:
    p = subparsers.add_parser(
        name,
        help=summary,
        description=description,
        parents=[common_options(suppress=True)],
        formatter_class=formatter,
    )
    p.set_defaults(handler=handler)
    return p


def add_path(p: ArgumentParser, what: str = "the table's base path") -> None:
    p.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help=f"{what}: a local directory or a URI pyarrow understands [env: {TABLE_PATH_ENV}]",
    )
