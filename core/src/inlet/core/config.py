"""Typed configuration keys.

A :class:`ConfigKey` names a Hudi/Inlet option, its type and default, so that the table's
``hoodie.properties``, write options and CLI flags all read values the same way.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from inlet.core.errors import InvalidConfigError, InvalidOptionError

T = TypeVar("T")


def parse_bool(value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def parse_list(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def parse_positive_int(value: str) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise ValueError("not an integer") from None
    if n <= 0:
        raise ValueError("must be a positive integer")
    return n


def parse_non_negative_int(value: str) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise ValueError("not an integer") from None
    if n < 0:
        raise ValueError("must not be negative")
    return n


# Hudi's codec names (Parquet's CompressionCodecName) -> the names pyarrow writes with; LZO has no
# writer in Arrow's Parquet implementation, so it is refused up front rather than at the first file.
_PARQUET_CODECS = {
    "snappy": "snappy",
    "gzip": "gzip",
    "zstd": "zstd",
    "lz4": "lz4",
    "lz4_raw": "lz4",
    "brotli": "brotli",
    "uncompressed": "none",
    "none": "none",
}


def parse_parquet_codec(value: str) -> str:
    v = value.strip().lower()
    if v not in _PARQUET_CODECS:
        raise ValueError(f"unsupported Parquet codec (one of: {', '.join(sorted(_PARQUET_CODECS))})")
    return _PARQUET_CODECS[v]


@dataclass(frozen=True)
class ConfigKey(Generic[T]):
    key: str
    parse: Callable[[str], T]
    default: T | None = None
    doc: str = ""
    alternatives: tuple[str, ...] = ()

    def get(self, props: Mapping[str, str]) -> T | None:
        for k in (self.key, *self.alternatives):
            if k in props:
                raw = props[k]
                try:
                    return self.parse(raw)
                except ValueError as e:
                    raise InvalidConfigError(f"{k}={raw!r}: {e}") from e
        return self.default

    def require(self, props: Mapping[str, str]) -> T:
        value = self.get(props)
        if value is None:
            raise InvalidConfigError(f"missing required config {self.key}")
        return value


def config_keys(*holders: type) -> list[ConfigKey[Any]]:
    """The :class:`ConfigKey` attributes of config holder classes (``WriteConfig``...), in order."""
    return [k for h in holders for k in vars(h).values() if isinstance(k, ConfigKey)]


def check_options(options: Mapping[str, str], keys: Iterable[ConfigKey[Any]]) -> None:
    """Parse every one of ``keys`` present in ``options``; a malformed value raises
    :class:`InvalidOptionError` naming the key and the value. Actions call this before they begin
    an instant, so a bad option never leaves a pending instant behind."""
    for key in keys:
        try:
            key.get(options)
        except InvalidConfigError as e:
            raise InvalidOptionError(f"invalid option {e}") from e.__cause__


class TableType(enum.StrEnum):
    COPY_ON_WRITE = "COPY_ON_WRITE"
    MERGE_ON_READ = "MERGE_ON_READ"

    @classmethod
    def parse(cls, value: str) -> TableType:
        v = value.strip().upper()
        aliases = {"COW": cls.COPY_ON_WRITE, "MOR": cls.MERGE_ON_READ}
        if v in aliases:
            return aliases[v]
        return cls(v)


class CdcLoggingMode(enum.StrEnum):
    """``hoodie.table.cdc.supplemental.logging.mode`` (Hudi's ``HoodieCDCSupplementalLoggingMode``):
    what a CDC log record keeps besides the operation and record key."""

    OP_KEY_ONLY = "OP_KEY_ONLY"
    DATA_BEFORE = "DATA_BEFORE"
    DATA_BEFORE_AFTER = "DATA_BEFORE_AFTER"

    @classmethod
    def parse(cls, value: str) -> CdcLoggingMode:
        v = value.strip().upper()
        try:
            return cls(v)
        except ValueError:
            raise ValueError(f"not a CDC supplemental logging mode: use one of {', '.join(cls)}") from None


class MergeMode(enum.StrEnum):
    EVENT_TIME_ORDERING = "EVENT_TIME_ORDERING"
    COMMIT_TIME_ORDERING = "COMMIT_TIME_ORDERING"

    @property
    def strategy_id(self) -> str:
        """``hoodie.record.merge.strategy.id`` that Apache Hudi records for this mode."""
        return _MERGE_STRATEGY_IDS[self]

    @property
    def payload_class(self) -> str:
        return _PAYLOAD_CLASSES[self]


_MERGE_STRATEGY_IDS = {
    MergeMode.EVENT_TIME_ORDERING: "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5",
    MergeMode.COMMIT_TIME_ORDERING: "ce9acb64-bde0-424c-9b91-f6ebba25356d",
}
_PAYLOAD_CLASSES = {
    MergeMode.EVENT_TIME_ORDERING: "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
    MergeMode.COMMIT_TIME_ORDERING: "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload",
}


class KeyGeneratorType(enum.StrEnum):
    SIMPLE = "SIMPLE"
    COMPLEX = "COMPLEX"
    TIMESTAMP = "TIMESTAMP"
    NON_PARTITION = "NON_PARTITION"
    CUSTOM = "CUSTOM"

    @classmethod
    def parse(cls, value: str) -> KeyGeneratorType:
        v = value.strip().upper()
        if "." in value:  # a Java class name, e.g. org.apache.hudi.keygen.SimpleKeyGenerator
            simple = value.rsplit(".", 1)[-1]
            for kt, cls_name in _KEYGEN_CLASSES.items():
                if simple == cls_name.rsplit(".", 1)[-1] or simple == cls_name.rsplit(".", 1)[-1].replace(
                    "KeyGenerator", "AvroKeyGenerator"
                ):
                    return kt
            raise ValueError(f"unsupported key generator class {value}")
        return cls(v)

    @property
    def class_name(self) -> str:
        return _KEYGEN_CLASSES[self]


_KEYGEN_CLASSES = {
    KeyGeneratorType.SIMPLE: "org.apache.hudi.keygen.SimpleKeyGenerator",
    KeyGeneratorType.COMPLEX: "org.apache.hudi.keygen.ComplexKeyGenerator",
    KeyGeneratorType.TIMESTAMP: "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
    KeyGeneratorType.NON_PARTITION: "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
    KeyGeneratorType.CUSTOM: "org.apache.hudi.keygen.CustomKeyGenerator",
}


class IndexType(enum.StrEnum):
    SIMPLE = "SIMPLE"
    BUCKET = "BUCKET"

    @classmethod
    def parse(cls, value: str) -> IndexType:
        return cls(value.strip().upper())


class WriteOperation(enum.StrEnum):
    """Hudi's ``WriteOperationType`` names (recorded as ``operationType`` in commit metadata)."""

    INSERT = "INSERT"
    UPSERT = "UPSERT"
    DELETE = "DELETE"
    BULK_INSERT = "BULK_INSERT"
    INSERT_OVERWRITE = "INSERT_OVERWRITE"
    INSERT_OVERWRITE_TABLE = "INSERT_OVERWRITE_TABLE"
    DELETE_PARTITION = "DELETE_PARTITION"
    COMPACT = "COMPACT"
    CLUSTER = "CLUSTER"

    @classmethod
    def parse(cls, value: str) -> WriteOperation:
        v = value.strip().upper().replace("-", "_")
        try:
            return cls(v)
        except ValueError:
            names = ", ".join(o.value.lower() for o in cls if o not in (cls.COMPACT, cls.CLUSTER))
            raise ValueError(f"unknown write operation {value!r} (expected one of: {names})") from None

    @property
    def is_replace(self) -> bool:
        return self in (
            WriteOperation.INSERT_OVERWRITE,
            WriteOperation.INSERT_OVERWRITE_TABLE,
            WriteOperation.DELETE_PARTITION,
            WriteOperation.CLUSTER,
        )


class BulkInsertSortMode(enum.StrEnum):
    NONE = "NONE"
    GLOBAL_SORT = "GLOBAL_SORT"
    PARTITION_SORT = "PARTITION_SORT"

    @classmethod
    def parse(cls, value: str) -> BulkInsertSortMode:
        return cls(value.strip().upper())


class TableConfig:
    """Keys of ``.hoodie/hoodie.properties`` (Hudi's ``HoodieTableConfig``)."""

    NAME = ConfigKey("hoodie.table.name", str)
    DATABASE_NAME = ConfigKey("hoodie.database.name", str)
    TYPE = ConfigKey("hoodie.table.type", TableType.parse, TableType.COPY_ON_WRITE)
    VERSION = ConfigKey("hoodie.table.version", int, 6)
    INITIAL_VERSION = ConfigKey("hoodie.table.initial.version", int)
    TIMELINE_LAYOUT_VERSION = ConfigKey("hoodie.timeline.layout.version", int, 1)
    TIMELINE_PATH = ConfigKey("hoodie.timeline.path", str, "timeline")
    TIMELINE_HISTORY_PATH = ConfigKey("hoodie.timeline.history.path", str, "history")
    RECORD_KEY_FIELDS = ConfigKey("hoodie.table.recordkey.fields", parse_list)
    PARTITION_FIELDS = ConfigKey("hoodie.table.partition.fields", parse_list)
    ORDERING_FIELDS = ConfigKey(
        "hoodie.table.precombine.field", parse_list, alternatives=("hoodie.table.ordering.fields",)
    )
    MERGE_MODE = ConfigKey("hoodie.record.merge.mode", MergeMode, None)
    MERGE_STRATEGY_ID = ConfigKey("hoodie.record.merge.strategy.id", str)
    PAYLOAD_CLASS = ConfigKey("hoodie.compaction.payload.class", str)
    KEY_GENERATOR_TYPE = ConfigKey(
        "hoodie.table.keygenerator.type",
        KeyGeneratorType.parse,
        alternatives=("hoodie.table.keygenerator.class",),
    )
    BASE_FILE_FORMAT = ConfigKey("hoodie.table.base.file.format", str, "PARQUET")
    POPULATE_META_FIELDS = ConfigKey("hoodie.populate.meta.fields", parse_bool, True)
    HIVE_STYLE_PARTITIONING = ConfigKey("hoodie.datasource.write.hive_style_partitioning", parse_bool, False)
    URL_ENCODE_PARTITIONING = ConfigKey("hoodie.datasource.write.partitionpath.urlencode", parse_bool, False)
    DROP_PARTITION_COLUMNS = ConfigKey("hoodie.datasource.write.drop.partition.columns", parse_bool, False)
    TIMELINE_TIMEZONE = ConfigKey("hoodie.table.timeline.timezone", str, "LOCAL")
    CHECKSUM = ConfigKey("hoodie.table.checksum", int)
    CREATE_SCHEMA = ConfigKey("hoodie.table.create.schema", str)
    CDC_ENABLED = ConfigKey("hoodie.table.cdc.enabled", parse_bool, False)
    CDC_LOGGING_MODE = ConfigKey(
        "hoodie.table.cdc.supplemental.logging.mode", CdcLoggingMode.parse, CdcLoggingMode.DATA_BEFORE_AFTER
    )
    ARCHIVELOG_FOLDER = ConfigKey("hoodie.archivelog.folder", str, "archived")
    # Inlet/Hudi write-side settings persisted with the table so every writer agrees.
    INDEX_TYPE = ConfigKey("hoodie.index.type", IndexType.parse, IndexType.SIMPLE)
    BUCKET_NUM = ConfigKey("hoodie.bucket.index.num.buckets", int, 4)
    BUCKET_HASH_FIELDS = ConfigKey("hoodie.bucket.index.hash.field", parse_list)
    # Timestamp-based key generator (Hudi's hoodie.keygen.timebased.* keys).
    TS_TYPE = ConfigKey("hoodie.keygen.timebased.timestamp.type", str)
    TS_INPUT_FORMAT = ConfigKey("hoodie.keygen.timebased.input.dateformat", str)
    TS_OUTPUT_FORMAT = ConfigKey("hoodie.keygen.timebased.output.dateformat", str)
    TS_TIMEZONE = ConfigKey("hoodie.keygen.timebased.timezone", str, "UTC")
    # persisted by writers that use non-blocking concurrency control (Hudi checks it at write time)
    CONCURRENCY_MODE = ConfigKey("hoodie.write.concurrency.mode", str)
    # the value Debezium writes for an unchanged TOASTed column (partial-update merging)
    PARTIAL_UPDATE_UNAVAILABLE_VALUE = ConfigKey(
        "hoodie.record.merge.property.partial.update.unavailable.value", str
    )


NBCC_MODE = "NON_BLOCKING_CONCURRENCY_CONTROL"


class WriteConfig:
    """Write-time options (Hudi's ``HoodieWriteConfig`` names); not persisted in the table."""

    PARQUET_MAX_FILE_SIZE = ConfigKey("hoodie.parquet.max.file.size", parse_positive_int, 120 * 1024 * 1024)
    PARQUET_SMALL_FILE_LIMIT = ConfigKey(
        "hoodie.parquet.small.file.limit", parse_non_negative_int, 100 * 1024 * 1024
    )
    COPY_ON_WRITE_RECORD_SIZE_ESTIMATE = ConfigKey(
        "hoodie.copyonwrite.record.size.estimate", parse_positive_int, 1024
    )
    PARQUET_COMPRESSION = ConfigKey("hoodie.parquet.compression.codec", parse_parquet_codec, "snappy")
    BULK_INSERT_SORT_MODE = ConfigKey(
        "hoodie.bulkinsert.sort.mode", BulkInsertSortMode.parse, BulkInsertSortMode.NONE
    )
    COMBINE_BEFORE_INSERT = ConfigKey("hoodie.combine.before.insert", parse_bool, True)
    # the writer's heartbeat period (Hudi's HoodieWriteConfig key and default); a pending instant
    # whose heartbeat is older than (tolerable misses + 1) periods is rolled back by the next writer
    HEARTBEAT_INTERVAL_MS = ConfigKey("hoodie.client.heartbeat.interval_in_ms", parse_positive_int, 60_000)
    # Inlet writes as an Apache Hudi writer with the metadata table disabled: every commit turns a
    # table's metadata table off (inlet.core.table.metadata_table); true is refused
    METADATA_ENABLE = ConfigKey("hoodie.metadata.enable", parse_bool, False)


class CompactionTrigger(enum.StrEnum):
    """When a compaction is due (Hudi's ``CompactionTriggerStrategy``)."""

    NUM_COMMITS = "NUM_COMMITS"  # enough delta commits since the last compaction
    TIME_ELAPSED = "TIME_ELAPSED"  # enough seconds since the last compaction (or first delta commit)
    NUM_OR_TIME = "NUM_OR_TIME"
    NUM_AND_TIME = "NUM_AND_TIME"

    @classmethod
    def parse(cls, value: str) -> CompactionTrigger:
        return cls(value.strip().upper().replace("-", "_"))


class CompactionStrategy(enum.StrEnum):
    """Which file slices a compaction plan takes first (Hudi's ``hoodie.compaction.strategy``)."""

    LOG_SIZE = "LOG_SIZE"  # LogFileSizeBasedCompactionStrategy: largest total log size first
    LOG_COUNT = "LOG_COUNT"  # LogFileNumBasedCompactionStrategy: most log files first

    @classmethod
    def parse(cls, value: str) -> CompactionStrategy:
        v = value.strip()
        simple = v.rsplit(".", 1)[-1]
        for strategy, class_name in _COMPACTION_STRATEGY_CLASSES.items():
            if simple == class_name.rsplit(".", 1)[-1]:
                return strategy
        return cls(v.upper().replace("-", "_"))

    @property
    def class_name(self) -> str:
        return _COMPACTION_STRATEGY_CLASSES[self]


_STRATEGY_PACKAGE = "org.apache.hudi.table.action.compact.strategy"
_COMPACTION_STRATEGY_CLASSES = {
    CompactionStrategy.LOG_SIZE: f"{_STRATEGY_PACKAGE}.LogFileSizeBasedCompactionStrategy",
    CompactionStrategy.LOG_COUNT: f"{_STRATEGY_PACKAGE}.LogFileNumBasedCompactionStrategy",
}


class ClusteringConfig:
    """Clustering options (Hudi's ``HoodieClusteringConfig`` names and defaults); not persisted."""

    SORT_COLUMNS: ConfigKey[list[str]] = ConfigKey(
        "hoodie.clustering.plan.strategy.sort.columns", parse_list, []
    )
    SMALL_FILE_LIMIT = ConfigKey(
        "hoodie.clustering.plan.strategy.small.file.limit", parse_positive_int, 300 * 1024 * 1024
    )
    TARGET_FILE_MAX_BYTES = ConfigKey(
        "hoodie.clustering.plan.strategy.target.file.max.bytes", parse_positive_int, 1024 * 1024 * 1024
    )
    MAX_BYTES_PER_GROUP = ConfigKey(
        "hoodie.clustering.plan.strategy.max.bytes.per.group", parse_positive_int, 2 * 1024 * 1024 * 1024
    )
    MAX_NUM_GROUPS = ConfigKey("hoodie.clustering.plan.strategy.max.num.groups", parse_positive_int, 30)
    # writes completed since the last clustering before the next one is planned
    INLINE_MAX_COMMITS = ConfigKey("hoodie.clustering.inline.max.commits", parse_positive_int, 4)

    @classmethod
    def validate(cls, options: Mapping[str, str]) -> None:
        check_options(options, (*config_keys(cls), *config_keys(WriteConfig)))


class CompactionConfig:
    """Compaction options (Hudi's ``HoodieCompactionConfig`` names and defaults); not persisted."""

    TRIGGER_STRATEGY = ConfigKey(
        "hoodie.compact.inline.trigger.strategy", CompactionTrigger.parse, CompactionTrigger.NUM_COMMITS
    )
    MAX_DELTA_COMMITS = ConfigKey("hoodie.compact.inline.max.delta.commits", int, 5)
    MAX_DELTA_SECONDS = ConfigKey("hoodie.compact.inline.max.delta.seconds", int, 60 * 60)
    STRATEGY = ConfigKey("hoodie.compaction.strategy", CompactionStrategy.parse, CompactionStrategy.LOG_SIZE)
    # the I/O (MB read + written) one compaction plan may take, as Hudi's BoundedIOCompactionStrategy
    TARGET_IO_MB = ConfigKey("hoodie.compaction.target.io", int, 500 * 1024)
    LOG_FILE_SIZE_THRESHOLD = ConfigKey("hoodie.compaction.logfile.size.threshold", int, 0)
    LOG_FILE_NUM_THRESHOLD = ConfigKey("hoodie.compaction.logfile.num.threshold", int, 0)


class ArchivalConfig:
    """Archive options (Hudi's ``HoodieArchivalConfig`` names and defaults); not persisted."""

    # archiving starts once more than MAX completed commits are active and leaves MIN of them
    MIN_COMMITS_TO_KEEP = ConfigKey("hoodie.keep.min.commits", parse_positive_int, 20)
    MAX_COMMITS_TO_KEEP = ConfigKey("hoodie.keep.max.commits", parse_positive_int, 30)
    # a layer of the LSM archived timeline with this many files is merged into the next layer
    TIMELINE_COMPACTION_BATCH_SIZE = ConfigKey(
        "hoodie.timeline.compaction.batch.size", parse_positive_int, 10
    )
    # true: archive past savepoints, skipping only the savepointed commits (Inlet refuses it)
    ARCHIVE_BEYOND_SAVEPOINT = ConfigKey("hoodie.archive.beyond.savepoint", parse_bool, False)
