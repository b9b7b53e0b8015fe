"""Hudi log blocks (the ``#HUDI#`` block format of Merge-on-Read log files).

Interface module: the block model shared by the log writer, the log reader, the merging reader
and compaction. Byte layout (big-endian, log format version 1)::

    #HUDI# | i64 block length | i32 format version (1) | i32 block type | header |
    i64 content length | content | footer | i64 total block length

header/footer: ``i32 count`` then per entry ``i32 key, i32 value length, UTF-8 value``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1
DATA_BLOCK_VERSION = 3  # version prefix of Avro data and delete block content


class BlockType(enum.IntEnum):
    COMMAND = 0
    DELETE = 1
    CORRUPT = 2
    AVRO_DATA = 3
    HFILE_DATA = 4
    PARQUET_DATA = 5
    CDC_DATA = 6


class HeaderKey(enum.IntEnum):
    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6
    IS_PARTIAL = 7
    BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS = 8


class CommandType(enum.IntEnum):
    ROLLBACK = 0


@dataclass
class DeleteRecord:
    """One entry of a delete block (``HoodieDeleteRecord``)."""

    record_key: str
    partition_path: str
    ordering_value: Any = None  # None = Hudi's default ordering value (the delete always wins)


class BlockHeaderView:
    """Header accessors shared by decoded blocks and the reader's block frames."""

    block_type: BlockType
    header: dict[HeaderKey, str]

    @property
    def instant_time(self) -> str:
        return self.header.get(HeaderKey.INSTANT_TIME, "")

    @property
    def target_instant_time(self) -> str | None:
        return self.header.get(HeaderKey.TARGET_INSTANT_TIME)

    @property
    def is_rollback(self) -> bool:
        return self.block_type is BlockType.COMMAND and self.header.get(HeaderKey.COMMAND_BLOCK_TYPE) == str(
            int(CommandType.ROLLBACK)
        )


@dataclass
class LogBlock(BlockHeaderView):
    """A decoded log block."""

    block_type: BlockType
    header: dict[HeaderKey, str] = field(default_factory=dict)
    footer: dict[HeaderKey, str] = field(default_factory=dict)
    records: pa.Table | None = None  # data blocks: records with the _hoodie_* meta columns
    deletes: list[DeleteRecord] | None = None  # delete blocks
    offset: int = 0  # byte offset of the block's magic in its file
