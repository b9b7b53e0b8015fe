"""Errors raised by the CLI itself (as opposed to ``inlet.core``'s :class:`InletError`)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A problem the CLI reports as one ``inlet: error: ...`` line."""

    exit_code = EXIT_FAILURE


class UsageError(CliError):
    """Bad or inconsistent command-line arguments or environment variables."""

    exit_code = EXIT_USAGE


class InputFileError(CliError):
    """An input file is missing, unreadable or not in the expected format."""
