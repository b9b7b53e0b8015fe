"""``inlet.core``: Apache Hudi (table version 8) tables for Python — engine-neutral, no services.

The entry point is :class:`HudiTable`; see its ``create``, ``open``, ``write`` and ``read``.
"""

from inlet.core.commit.protocol import CommitProtocol, LocalCommitProtocol
from inlet.core.commit.result import CommitResult
from inlet.core.config import (
    BulkInsertSortMode,
    IndexType,
    KeyGeneratorType,
    MergeMode,
    TableType,
    WriteOperation,
)
from inlet.core.errors import (
    CommitConflictError,
    CorruptFileError,
    InletError,
    InstantNotFoundError,
    InvalidConfigError,
    InvalidInputError,
    InvalidOptionError,
    SchemaError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedError,
)
from inlet.core.keys import TimestampPartitioning
from inlet.core.table.facade import HudiTable
from inlet.core.timeline.commit_metadata import CommitMetadata, WriteStat
from inlet.core.timeline.instant import Instant, State

__all__ = [
    "BulkInsertSortMode",
    "CommitConflictError",
    "CommitMetadata",
    "CommitProtocol",
    "CommitResult",
    "CorruptFileError",
    "HudiTable",
    "IndexType",
    "InletError",
    "Instant",
    "InstantNotFoundError",
    "InvalidConfigError",
    "InvalidInputError",
    "InvalidOptionError",
    "KeyGeneratorType",
    "LocalCommitProtocol",
    "MergeMode",
    "SchemaError",
    "State",
    "TableExistsError",
    "TableNotFoundError",
    "TableType",
    "TimestampPartitioning",
    "UnsupportedError",
    "WriteOperation",
    "WriteStat",
]
