"""The table's meta: ``hoodie.properties`` parsed once into typed, immutable values.

Hudi's ``HoodieTableConfig`` plays this part: every operation reads the table type, keys, merge
mode, index and timeline layout from it rather than from the raw properties. A change of the
properties (compaction deleting the metadata table) makes a new meta; this one never changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType

from inlet.core.config import (
    NBCC_MODE,
    CdcLoggingMode,
    IndexType,
    KeyGeneratorType,
    MergeMode,
    TableConfig,
    TableType,
)
from inlet.core.errors import UnsupportedError
from inlet.core.keys import KeyGenerator, TimestampPartitioning
from inlet.core.table.properties import SUPPORTED_READ_VERSIONS


@dataclass(frozen=True, eq=False)
class TableMeta:
    """What ``hoodie.properties`` says about a table. The version and timeline layout are checked
    when it is made; every other value is parsed on first use (a table Inlet can read but not
    write, e.g. with a custom key generator, still opens) and then kept."""

    props: Mapping[str, str]
    version: int
    layout_version: int
    timeline_path: str

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TableMeta:
        version = TableConfig.VERSION.require(props)
        if version not in SUPPORTED_READ_VERSIONS:
            raise UnsupportedError(f"Hudi table version {version} is not supported (supported: 6, 8, 9)")
        return cls(
            props=MappingProxyType(dict(props)),
            version=version,
            layout_version=TableConfig.TIMELINE_LAYOUT_VERSION.require(props),
            timeline_path=TableConfig.TIMELINE_PATH.require(props),
        )

    @cached_property
    def name(self) -> str:
        return TableConfig.NAME.require(self.props)

    @cached_property
    def table_type(self) -> TableType:
        return TableConfig.TYPE.require(self.props)

    @cached_property
    def record_key_fields(self) -> tuple[str, ...]:
        return tuple(TableConfig.RECORD_KEY_FIELDS.get(self.props) or ())

    @cached_property
    def partition_fields(self) -> tuple[str, ...]:
        return tuple(TableConfig.PARTITION_FIELDS.get(self.props) or ())

    @cached_property
    def ordering_field(self) -> str | None:
        fields = TableConfig.ORDERING_FIELDS.get(self.props)
        return fields[0] if fields else None

    @cached_property
    def merge_mode(self) -> MergeMode:
        return TableConfig.MERGE_MODE.get(self.props) or (
            MergeMode.EVENT_TIME_ORDERING if self.ordering_field else MergeMode.COMMIT_TIME_ORDERING
        )

    @cached_property
    def index_type(self) -> IndexType:
        return TableConfig.INDEX_TYPE.require(self.props)

    @cached_property
    def populate_meta_fields(self) -> bool:
        return bool(TableConfig.POPULATE_META_FIELDS.get(self.props))

    @cached_property
    def cdc_mode(self) -> CdcLoggingMode | None:
        """The supplemental logging mode of a CDC-enabled table (``hoodie.table.cdc.enabled``), else None."""
        if not TableConfig.CDC_ENABLED.get(self.props):
            return None
        return TableConfig.CDC_LOGGING_MODE.require(self.props)

    @cached_property
    def bucket_hash_fields(self) -> tuple[str, ...]:
        """Fields the bucket index hashes (``hoodie.bucket.index.hash.field``; default the record key)."""
        return tuple(TableConfig.BUCKET_HASH_FIELDS.get(self.props) or self.record_key_fields)

    @cached_property
    def num_buckets(self) -> int:
        return TableConfig.BUCKET_NUM.require(self.props)

    @cached_property
    def key_generator(self) -> KeyGenerator:
        return _key_generator(self.props, self.record_key_fields, self.partition_fields)

    @cached_property
    def nbcc(self) -> bool:
        """Whether writers use non-blocking concurrency control (``hoodie.write.concurrency.mode``)."""
        return (TableConfig.CONCURRENCY_MODE.get(self.props) or "").upper() == NBCC_MODE


def _key_generator(
    props: Mapping[str, str], record_keys: tuple[str, ...], partitions: tuple[str, ...]
) -> KeyGenerator:
    kgen = TableConfig.KEY_GENERATOR_TYPE.get(props)
    if kgen is None:
        kgen = KeyGeneratorType.COMPLEX if len(record_keys) > 1 else KeyGeneratorType.SIMPLE
    ts = None
    if kgen is KeyGeneratorType.TIMESTAMP:
        ts = TimestampPartitioning(
            timestamp_type=TableConfig.TS_TYPE.get(props) or "EPOCHMILLISECONDS",
            output_format=TableConfig.TS_OUTPUT_FORMAT.get(props) or "yyyy-MM-dd",
            input_format=TableConfig.TS_INPUT_FORMAT.get(props),
            timezone=TableConfig.TS_TIMEZONE.require(props),
        )
    return KeyGenerator(
        record_key_fields=record_keys,
        partition_fields=partitions,
        hive_style=bool(TableConfig.HIVE_STYLE_PARTITIONING.get(props)),
        url_encode=bool(TableConfig.URL_ENCODE_PARTITIONING.get(props)),
        key_type=kgen,
        timestamp=ts,
    )
