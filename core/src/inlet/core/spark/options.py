"""Apache Hudi's Spark option names, mapped to Inlet's table properties and write options.

Examples written for Apache Hudi's PySpark API work unchanged: ``hoodie.table.name``,
``hoodie.datasource.write.operation``, ``...recordkey.field``, ``...partitionpath.field``,
``...precombine.field`` (Hudi 1.x: ``hoodie.table.ordering.fields``), ``...table.type``,
``...keygenerator.class`` / ``.type``, ``...hive_style_partitioning``, ``hoodie.index.type``,
``hoodie.bucket.index.num.buckets``, ``hoodie.bucket.index.hash.field``,
``hoodie.write.record.merge.mode``, ``hoodie.datasource.write.partitions.to.delete``,
``hoodie.datasource.write.commitmeta.key.prefix`` (options whose name starts with it go to the
commit's extra metadata, as in Hudi), the ``hoodie.keygen.timebased.*`` keys, and on the read
side ``hoodie.datasource.query.type`` and ``as.of.instant``.

- Table options (:data:`TABLE_OPTIONS`) create the table on its first write; on an existing
  table a value that contradicts the table's ``hoodie.properties`` is refused, naming both.
- Every other ``hoodie.*`` option is passed to the core writer as a write option
  (``hoodie.parquet.max.file.size``, ``hoodie.bulkinsert.sort.mode``, ...).
- Options outside ``hoodie.*`` that mean nothing to Inlet (``path``, Spark's own) are ignored.

This module itself uses no pyspark (the package imports it, for the write engine).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from inlet.core.config import (
    CdcLoggingMode,
    IndexType,
    KeyGeneratorType,
    MergeMode,
    TableConfig,
    TableType,
    WriteOperation,
    parse_bool,
    parse_list,
)
from inlet.core.errors import InvalidConfigError, UnsupportedError
from inlet.core.keys import TimestampPartitioning
from inlet.core.table.facade import HudiTable

# ------------------------------------------------------------------------------ option names

TABLE_NAME = "hoodie.table.name"
WRITE_TABLE_NAME = "hoodie.datasource.write.table.name"
OPERATION = "hoodie.datasource.write.operation"
TABLE_TYPE = "hoodie.datasource.write.table.type"
STORAGE_TYPE = "hoodie.datasource.write.storage.type"  # Hudi's deprecated alias of TABLE_TYPE
RECORDKEY_FIELD = "hoodie.datasource.write.recordkey.field"
PARTITIONPATH_FIELD = "hoodie.datasource.write.partitionpath.field"
PRECOMBINE_FIELD = "hoodie.datasource.write.precombine.field"
ORDERING_FIELDS = "hoodie.table.ordering.fields"
KEYGENERATOR_CLASS = "hoodie.datasource.write.keygenerator.class"
KEYGENERATOR_TYPE = "hoodie.datasource.write.keygenerator.type"
HIVE_STYLE_PARTITIONING = "hoodie.datasource.write.hive_style_partitioning"
URL_ENCODE_PARTITIONING = "hoodie.datasource.write.partitionpath.urlencode"
INDEX_TYPE = "hoodie.index.type"
BUCKET_ENGINE = "hoodie.index.bucket.engine"
BUCKET_NUM = "hoodie.bucket.index.num.buckets"
BUCKET_HASH_FIELD = "hoodie.bucket.index.hash.field"
MERGE_MODE = "hoodie.write.record.merge.mode"
TABLE_MERGE_MODE = "hoodie.record.merge.mode"
PAYLOAD_CLASS = "hoodie.datasource.write.payload.class"
DATABASE_NAME = "hoodie.database.name"
POPULATE_META_FIELDS = "hoodie.populate.meta.fields"
CONCURRENCY_MODE = TableConfig.CONCURRENCY_MODE.key
PARTITIONS_TO_DELETE = "hoodie.datasource.write.partitions.to.delete"
COMMIT_METADATA_PREFIX = "hoodie.datasource.write.commitmeta.key.prefix"
INSERT_DROP_DUPLICATES = "hoodie.datasource.write.insert.drop.duplicates"
TS_TYPE = "hoodie.keygen.timebased.timestamp.type"
TS_INPUT_FORMAT = "hoodie.keygen.timebased.input.dateformat"
TS_OUTPUT_FORMAT = "hoodie.keygen.timebased.output.dateformat"
TS_TIMEZONE = "hoodie.keygen.timebased.timezone"
# read side (the data source reads them; listed so that writes do not pass them to the writer)
QUERY_TYPE = "hoodie.datasource.query.type"
VIEW_TYPE = "hoodie.datasource.view.type"  # Hudi's deprecated alias of QUERY_TYPE
AS_OF_INSTANT = "as.of.instant"

DEFAULT_COMMIT_METADATA_PREFIX = "_"

# Spark-engine knobs (Hudi's names where Hudi has one)
UPSERT_PARALLELISM = "hoodie.upsert.shuffle.parallelism"
INSERT_PARALLELISM = "hoodie.insert.shuffle.parallelism"
BULK_INSERT_PARALLELISM = "hoodie.bulkinsert.shuffle.parallelism"
DELETE_PARALLELISM = "hoodie.delete.shuffle.parallelism"
TAGGED_STORAGE_LEVEL = "hoodie.write.tagged.record.storage.level"
# fault injection for tests: crash (os._exit) at this point of the first attempt of task 0
CRASH_AT = "hoodie.inlet.spark.crash.at"

# Options a write reads itself; they are not passed on to the core writer.
_CONSUMED = {
    TABLE_NAME,
    WRITE_TABLE_NAME,
    OPERATION,
    TABLE_TYPE,
    STORAGE_TYPE,
    RECORDKEY_FIELD,
    PARTITIONPATH_FIELD,
    PRECOMBINE_FIELD,
    ORDERING_FIELDS,
    KEYGENERATOR_CLASS,
    KEYGENERATOR_TYPE,
    HIVE_STYLE_PARTITIONING,
    URL_ENCODE_PARTITIONING,
    INDEX_TYPE,
    BUCKET_ENGINE,
    BUCKET_NUM,
    BUCKET_HASH_FIELD,
    MERGE_MODE,
    TABLE_MERGE_MODE,
    PAYLOAD_CLASS,
    DATABASE_NAME,
    POPULATE_META_FIELDS,
    CONCURRENCY_MODE,
    PARTITIONS_TO_DELETE,
    COMMIT_METADATA_PREFIX,
    INSERT_DROP_DUPLICATES,
    TS_TYPE,
    TS_INPUT_FORMAT,
    TS_OUTPUT_FORMAT,
    TS_TIMEZONE,
    QUERY_TYPE,
    VIEW_TYPE,
    AS_OF_INSTANT,
    # Hudi's table-property names, accepted as options too
    TableConfig.RECORD_KEY_FIELDS.key,
    TableConfig.PARTITION_FIELDS.key,
    TableConfig.ORDERING_FIELDS.key,
    TableConfig.TYPE.key,
    TableConfig.KEY_GENERATOR_TYPE.key,
    "hoodie.table.keygenerator.class",
}


@dataclass(frozen=True)
class TableOption:
    """A table-level setting: the option names that give it (first wins), the table property it is
    checked against, and how values compare."""

    name: str
    options: tuple[str, ...]
    prop: str
    normalize: Callable[[str], str] = str.strip


def _fields(value: str) -> str:
    return ",".join(parse_list(value))


def _upper(value: str) -> str:
    return value.strip().upper()


def _table_type(value: str) -> str:
    try:
        return TableType.parse(value).value
    except ValueError:
        raise InvalidConfigError(f"unknown table type {value!r} (COPY_ON_WRITE or MERGE_ON_READ)") from None


def _key_generator(value: str) -> str:
    try:
        return KeyGeneratorType.parse(value).value
    except ValueError as e:
        raise InvalidConfigError(f"unsupported key generator {value!r}: {e}") from None


def _bool(value: str) -> str:
    try:
        return str(parse_bool(value)).lower()
    except ValueError as e:
        raise InvalidConfigError(str(e)) from None


def _int(value: str) -> str:
    try:
        return str(int(value.strip()))
    except ValueError:
        raise InvalidConfigError(f"not an integer: {value!r}") from None


TABLE_OPTIONS = (
    TableOption("table name", (TABLE_NAME, WRITE_TABLE_NAME), TableConfig.NAME.key),
    TableOption(
        "record key fields",
        (RECORDKEY_FIELD, TableConfig.RECORD_KEY_FIELDS.key),
        "hoodie.table.recordkey.fields",
        _fields,
    ),
    TableOption(
        "partition fields",
        (PARTITIONPATH_FIELD, TableConfig.PARTITION_FIELDS.key),
        "hoodie.table.partition.fields",
        _fields,
    ),
    TableOption(
        "ordering field",
        (PRECOMBINE_FIELD, ORDERING_FIELDS, TableConfig.ORDERING_FIELDS.key),
        TableConfig.ORDERING_FIELDS.key,
        _fields,
    ),
    TableOption(
        "table type", (TABLE_TYPE, STORAGE_TYPE, TableConfig.TYPE.key), TableConfig.TYPE.key, _table_type
    ),
    TableOption(
        "key generator",
        (
            KEYGENERATOR_CLASS,
            KEYGENERATOR_TYPE,
            TableConfig.KEY_GENERATOR_TYPE.key,
            "hoodie.table.keygenerator.class",
        ),
        TableConfig.KEY_GENERATOR_TYPE.key,
        _key_generator,
    ),
    TableOption(
        "hive-style partitioning", (HIVE_STYLE_PARTITIONING,), TableConfig.HIVE_STYLE_PARTITIONING.key, _bool
    ),
    TableOption(
        "URL-encoded partitioning", (URL_ENCODE_PARTITIONING,), TableConfig.URL_ENCODE_PARTITIONING.key, _bool
    ),
    TableOption("index type", (INDEX_TYPE,), TableConfig.INDEX_TYPE.key, _upper),
    TableOption("bucket count", (BUCKET_NUM,), TableConfig.BUCKET_NUM.key, _int),
    TableOption("bucket hash fields", (BUCKET_HASH_FIELD,), TableConfig.BUCKET_HASH_FIELDS.key, _fields),
    TableOption("merge mode", (MERGE_MODE, TABLE_MERGE_MODE), TableConfig.MERGE_MODE.key, _upper),
    TableOption("populate meta fields", (POPULATE_META_FIELDS,), TableConfig.POPULATE_META_FIELDS.key, _bool),
    TableOption("timestamp type", (TS_TYPE,), TableConfig.TS_TYPE.key, _upper),
    TableOption("timestamp output format", (TS_OUTPUT_FORMAT,), TableConfig.TS_OUTPUT_FORMAT.key),
    TableOption("timestamp input format", (TS_INPUT_FORMAT,), TableConfig.TS_INPUT_FORMAT.key),
    TableOption("timestamp time zone", (TS_TIMEZONE,), TableConfig.TS_TIMEZONE.key),
    TableOption("CDC", (TableConfig.CDC_ENABLED.key,), TableConfig.CDC_ENABLED.key, _bool),
    TableOption(
        "CDC supplemental logging mode",
        (TableConfig.CDC_LOGGING_MODE.key,),
        TableConfig.CDC_LOGGING_MODE.key,
        _upper,
    ),
)

_PAYLOAD_MERGE_MODES = {
    "org.apache.hudi.common.model.DefaultHoodieRecordPayload": MergeMode.EVENT_TIME_ORDERING,
    "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload": MergeMode.COMMIT_TIME_ORDERING,
}


@dataclass(frozen=True)
class WriteSettings:
    """What a Spark write's options say."""

    operation: WriteOperation
    table: dict[str, str]  # TableOption.prop -> normalised value, for the options given
    sources: dict[str, str]  # TableOption.prop -> the option name that gave it
    write_options: dict[str, str]  # passed to the core writer
    extra_metadata: dict[str, str] = field(default_factory=dict)
    partitions: tuple[str, ...] = ()  # delete_partition: hoodie.datasource.write.partitions.to.delete
    database: str | None = None
    concurrency_mode: str | None = None

    def get(self, prop: str) -> str | None:
        return self.table.get(prop)


def _first(options: Mapping[str, str], names: Sequence[str]) -> tuple[str, str] | None:
    for n in names:
        if n in options and str(options[n]).strip() != "":
            return n, str(options[n])
    return None


def parse_write_options(options: Mapping[str, object] | None) -> WriteSettings:
    """Read a write's options (values may be given as any type; they are compared as text)."""
    opts = {str(k): str(v) for k, v in (options or {}).items() if v is not None}
    try:
        operation = WriteOperation.parse(opts.get(OPERATION, "upsert"))
    except ValueError as e:
        raise InvalidConfigError(f"{OPERATION}: {e}") from None
    if operation in (WriteOperation.COMPACT, WriteOperation.CLUSTER):
        raise InvalidConfigError(f"{OPERATION}={opts[OPERATION]} is a table service, not a write operation")
    table: dict[str, str] = {}
    sources: dict[str, str] = {}
    for option in TABLE_OPTIONS:
        given = _first(opts, option.options)
        if given is not None:
            sources[option.prop] = given[0]
            table[option.prop] = option.normalize(given[1])
    if INDEX_TYPE in opts:
        try:
            IndexType.parse(opts[INDEX_TYPE])
        except ValueError:
            raise UnsupportedError(
                f"{INDEX_TYPE}={opts[INDEX_TYPE]} is not supported: Inlet writes with the SIMPLE and BUCKET "
                "indexes (Hudi's bloom and record-level indexes need the metadata table)"
            ) from None
    engine = opts.get(BUCKET_ENGINE, "SIMPLE").strip().upper()
    if engine != "SIMPLE":
        raise UnsupportedError(
            f"{BUCKET_ENGINE}={opts[BUCKET_ENGINE]}: only the SIMPLE bucket engine is supported"
        )
    if TableConfig.MERGE_MODE.key in table:
        try:
            MergeMode(table[TableConfig.MERGE_MODE.key])
        except ValueError:
            raise InvalidConfigError(
                f"unknown merge mode {table[TableConfig.MERGE_MODE.key]!r} (EVENT_TIME_ORDERING or "
                "COMMIT_TIME_ORDERING; custom merging is not supported)"
            ) from None
    payload = opts.get(PAYLOAD_CLASS, "").strip()
    if payload:
        mode = _PAYLOAD_MERGE_MODES.get(payload)
        if mode is None:
            raise UnsupportedError(
                f"{PAYLOAD_CLASS}={payload} is not supported (use {', '.join(sorted(_PAYLOAD_MERGE_MODES))} "
                f"or {MERGE_MODE})"
            )
        given_mode = table.setdefault(TableConfig.MERGE_MODE.key, mode.value)
        sources.setdefault(TableConfig.MERGE_MODE.key, PAYLOAD_CLASS)
        if given_mode != mode.value:
            raise InvalidConfigError(f"{PAYLOAD_CLASS}={payload} contradicts {MERGE_MODE}={given_mode}")
    if _bool(opts.get(INSERT_DROP_DUPLICATES, "false")) == "true":
        raise UnsupportedError(
            f"{INSERT_DROP_DUPLICATES}=true is not supported; use the upsert operation to merge records "
            "with stored ones"
        )
    prefix = opts.get(COMMIT_METADATA_PREFIX, DEFAULT_COMMIT_METADATA_PREFIX)
    extra = {k: v for k, v in opts.items() if prefix and k.startswith(prefix) and not k.startswith("hoodie.")}
    write_options = {k: v for k, v in opts.items() if k.startswith("hoodie.") and k not in _CONSUMED}
    return WriteSettings(
        operation=operation,
        table=table,
        sources=sources,
        write_options=write_options,
        extra_metadata=extra,
        partitions=tuple(parse_list(opts.get(PARTITIONS_TO_DELETE, ""))),
        database=opts.get(DATABASE_NAME) or None,
        concurrency_mode=opts.get(CONCURRENCY_MODE) or None,
    )


def create_table(path: str, settings: WriteSettings) -> HudiTable:
    """Create the table a first write names (Hudi's save modes create a missing table)."""
    t = settings.table
    name = t.get(TableConfig.NAME.key)
    if not name:
        raise InvalidConfigError(f"the table does not exist yet: {TABLE_NAME} is needed to create it")
    keys = t.get("hoodie.table.recordkey.fields")
    if not keys:
        raise InvalidConfigError(f"the table does not exist yet: {RECORDKEY_FIELD} is needed to create it")
    ts_type = t.get(TableConfig.TS_TYPE.key)
    timestamp = None
    if ts_type or t.get(TableConfig.TS_OUTPUT_FORMAT.key):
        timestamp = TimestampPartitioning(
            timestamp_type=ts_type or "EPOCHMILLISECONDS",
            output_format=t.get(TableConfig.TS_OUTPUT_FORMAT.key) or "yyyy-MM-dd",
            input_format=t.get(TableConfig.TS_INPUT_FORMAT.key),
            timezone=t.get(TableConfig.TS_TIMEZONE.key) or "UTC",
        )
    extra: dict[str, str] = {}
    if t.get(TableConfig.BUCKET_HASH_FIELDS.key):
        extra[TableConfig.BUCKET_HASH_FIELDS.key] = t[TableConfig.BUCKET_HASH_FIELDS.key]
    if t.get(TableConfig.POPULATE_META_FIELDS.key) == "false":
        extra[TableConfig.POPULATE_META_FIELDS.key] = "false"
    if settings.concurrency_mode:
        extra[CONCURRENCY_MODE] = settings.concurrency_mode
    partition_by = t.get("hoodie.table.partition.fields") or None
    kgen = t.get(TableConfig.KEY_GENERATOR_TYPE.key)
    if kgen == KeyGeneratorType.SIMPLE.value and not partition_by:
        kgen = None  # Hudi's default class with no partition field: a non-partitioned table
    return HudiTable.create(
        path,
        name=name,
        record_key=keys,
        partition_by=partition_by,
        table_type=t.get(TableConfig.TYPE.key, TableType.COPY_ON_WRITE.value),
        ordering_field=t.get(TableConfig.ORDERING_FIELDS.key) or None,
        merge_mode=t.get(TableConfig.MERGE_MODE.key) or None,
        hive_style=t.get(TableConfig.HIVE_STYLE_PARTITIONING.key) == "true",
        url_encode=t.get(TableConfig.URL_ENCODE_PARTITIONING.key) == "true",
        key_generator=kgen,
        index=t.get(TableConfig.INDEX_TYPE.key, IndexType.SIMPLE.value),
        buckets=int(t.get(TableConfig.BUCKET_NUM.key, "4")),
        database=settings.database,
        timestamp=timestamp,
        extra_properties=extra or None,
        cdc=t.get(TableConfig.CDC_ENABLED.key) == "true",
        cdc_logging_mode=t.get(TableConfig.CDC_LOGGING_MODE.key)
        if t.get(TableConfig.CDC_ENABLED.key) == "true"
        else None,
    )


def check_against_table(settings: WriteSettings, props: Mapping[str, str]) -> None:
    """Refuse table options that contradict an existing table's properties, naming both values."""
    bucketed = props.get(TableConfig.INDEX_TYPE.key, "").strip().upper() == IndexType.BUCKET.value
    for option in TABLE_OPTIONS:
        given = settings.table.get(option.prop)
        if given is None:
            continue
        if not bucketed and option.prop in (TableConfig.BUCKET_NUM.key, TableConfig.BUCKET_HASH_FIELDS.key):
            continue  # bucket settings mean nothing to a table without the bucket index (as in Hudi)
        stored = _stored(option, props)
        if stored is None:
            if option.prop in (TableConfig.NAME.key, TableConfig.TYPE.key, TableConfig.INDEX_TYPE.key):
                continue  # defaults: compared below through the table's effective value
            if option.prop == TableConfig.BUCKET_HASH_FIELDS.key:
                stored = props.get("hoodie.table.recordkey.fields")
            if stored is None:
                raise InvalidConfigError(
                    f"option {_option_name(option, settings)}={given} contradicts the table, which has no "
                    f"{option.prop}"
                )
        if given != stored and not _equivalent(option, given, stored, props):
            raise InvalidConfigError(
                f"option {_option_name(option, settings)}={given} contradicts the table's {option.prop}={stored}"
            )


def _stored(option: TableOption, props: Mapping[str, str]) -> str | None:
    if option.prop == TableConfig.ORDERING_FIELDS.key:
        raw = props.get(TableConfig.ORDERING_FIELDS.key) or props.get("hoodie.table.ordering.fields")
    elif option.prop == TableConfig.KEY_GENERATOR_TYPE.key:
        raw = props.get(TableConfig.KEY_GENERATOR_TYPE.key) or props.get("hoodie.table.keygenerator.class")
    elif option.prop == TableConfig.TYPE.key:
        raw = props.get(option.prop, TableType.COPY_ON_WRITE.value)
    elif option.prop == TableConfig.INDEX_TYPE.key:
        raw = props.get(option.prop, IndexType.SIMPLE.value)
    elif (
        option.prop == TableConfig.BUCKET_NUM.key
        and props.get(TableConfig.INDEX_TYPE.key, "").upper() == "BUCKET"
    ):
        raw = props.get(option.prop, str(TableConfig.BUCKET_NUM.default))
    elif option.prop in (TableConfig.HIVE_STYLE_PARTITIONING.key, TableConfig.URL_ENCODE_PARTITIONING.key):
        raw = props.get(option.prop, "false")
    elif option.prop == TableConfig.POPULATE_META_FIELDS.key:
        raw = props.get(option.prop, "true")
    elif option.prop == TableConfig.CDC_ENABLED.key:
        raw = props.get(option.prop, "false")
    elif option.prop == TableConfig.CDC_LOGGING_MODE.key and props.get(TableConfig.CDC_ENABLED.key) == "true":
        raw = props.get(option.prop, CdcLoggingMode.DATA_BEFORE_AFTER.value)
    elif option.prop == TableConfig.MERGE_MODE.key:
        raw = props.get(option.prop) or (
            MergeMode.EVENT_TIME_ORDERING.value
            if props.get(TableConfig.ORDERING_FIELDS.key)
            else MergeMode.COMMIT_TIME_ORDERING.value
        )
    else:
        raw = props.get(option.prop)
    if raw is None:
        return None
    return option.normalize(raw)


def _option_name(option: TableOption, settings: WriteSettings) -> str:
    return settings.sources.get(option.prop, option.options[0])


def _equivalent(option: TableOption, given: str, stored: str, props: Mapping[str, str]) -> bool:
    """Hudi's default key generator class (simple) on a table without partition fields names the
    non-partitioned key generator the table records."""
    return (
        option.prop == TableConfig.KEY_GENERATOR_TYPE.key
        and given == KeyGeneratorType.SIMPLE.value
        and stored == KeyGeneratorType.NON_PARTITION.value
        and not props.get(TableConfig.PARTITION_FIELDS.key)
    )


def read_options(options: Mapping[str, object] | None) -> dict[str, str]:
    """Read options as text, Hudi's deprecated names mapped to the current ones."""
    opts = {str(k): str(v) for k, v in (options or {}).items() if v is not None}
    if VIEW_TYPE in opts and QUERY_TYPE not in opts:
        opts[QUERY_TYPE] = opts.pop(VIEW_TYPE)
    return opts
