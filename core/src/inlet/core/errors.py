"""The one exception hierarchy of ``inlet.core``.

Every error a user can cause or meet carries a message that names the problem; the CLI prints
``str(error)`` as a single line.
"""

from __future__ import annotations


class InletError(Exception):
    """Base class of every error raised by Inlet."""


class TableNotFoundError(InletError):
    """The path holds no Hudi table (no ``.hoodie/hoodie.properties``)."""


class TableExistsError(InletError):
    """A table already exists where one was to be created."""


class InvalidConfigError(InletError):
    """A configuration value is missing, unknown or malformed."""


class SchemaError(InletError):
    """Input data does not fit the table schema (missing column, incompatible type...)."""


class InvalidInputError(InletError):
    """Input records are malformed (null record key, unreadable file, unknown column...)."""


class InvalidOptionError(InvalidConfigError, InvalidInputError):
    """A write or table-service option has a malformed value (``hoodie.parquet.max.file.size=big``).

    Raised before the action begins, so nothing is written and no instant is left behind. It is
    both a configuration error and an input error: callers catching either see it."""


class UnsupportedError(InletError):
    """The table uses a feature this version of Inlet cannot handle."""


class CorruptFileError(InletError):
    """A table file cannot be decoded."""


class CommitConflictError(InletError):
    """A concurrent commit touched the same file groups; retrying the write is safe."""

    retryable = True


class InstantNotFoundError(InletError):
    """An instant time named by the user is not on the timeline."""
