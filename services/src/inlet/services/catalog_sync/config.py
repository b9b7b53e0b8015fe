"""Sync options, by Apache Hudi's names (``HiveSyncConfigHolder``, ``HoodieSyncConfig``), with Hudi's defaults.

Values not given are inferred as Hudi infers them: the table name from ``hoodie.table.name``, the database
from ``hoodie.database.name`` (else ``default``), the partition fields from ``hoodie.table.partition.fields``,
the partition value extractor from the number of partition fields and hive-style paths, and URL-decoding of
partition values from ``hoodie.datasource.write.partitionpath.urlencode``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from inlet.services.catalog_sync.errors import CatalogSyncError
from inlet.services.catalog_sync.partitions import default_extractor_class, extractor_by_name

HS = "hoodie.datasource.hive_sync."

DATABASE = HS + "database"
TABLE = HS + "table"
PARTITION_FIELDS = HS + "partition_fields"
PARTITION_EXTRACTOR_CLASS = HS + "partition_extractor_class"
BASE_FILE_FORMAT = HS + "base_file_format"
SKIP_RO_SUFFIX = HS + "skip_ro_suffix"
SUPPORT_TIMESTAMP = HS + "support_timestamp"
TABLE_PROPERTIES = HS + "table_properties"
SERDE_PROPERTIES = HS + "serde_properties"
SYNC_AS_DATASOURCE = HS + "sync_as_datasource"
SCHEMA_STRING_LENGTH_THRESH = HS + "schema_string_length_thresh"
CREATE_MANAGED_TABLE = HS + "create_managed_table"
OMIT_METADATA_FIELDS = HS + "omit_metadata_fields"
AUTO_CREATE_DATABASE = HS + "auto_create_database"
TABLE_STRATEGY = HS + "table.strategy"
METASTORE_URIS = HS + "metastore.uris"
MODE = HS + "mode"
BATCH_NUM = HS + "batch_num"
SYNC_COMMENT = HS + "sync_comment"
DECODE_PARTITION = "hoodie.meta.sync.decode_partition"
INCREMENTAL = "hoodie.meta.sync.incremental"
SNAPSHOT_WITH_TABLE_NAME = "hoodie.meta.sync.sync_snapshot_with_table_name"
SPARK_VERSION = "hoodie.meta_sync.spark.version"
CONDITIONAL_SYNC = "hoodie.datasource.meta_sync.condition.sync"
BASE_PATH = "hoodie.datasource.meta.sync.base.path"

#: accepted for compatibility, without effect here (JDBC/HiveQL modes, metadata-table listing, pushdown)
IGNORED = frozenset(
    {
        HS + "enable",
        HS + "use_jdbc",
        HS + "jdbcurl",
        HS + "username",
        HS + "password",
        HS + "assume_date_partitioning",
        HS + "filter_pushdown_enabled",
        HS + "filter_pushdown_max_size",
        HS + "ignore_exceptions",
        HS + "use_pre_apache_input_format",
        HS + "bucket_sync",
        HS + "bucket_sync_spec",
        "hoodie.meta.sync.metadata_file_listing",
        "hoodie.datasource.meta.sync.enable",
    }
)

KNOWN = frozenset(
    {
        DATABASE,
        TABLE,
        PARTITION_FIELDS,
        PARTITION_EXTRACTOR_CLASS,
        BASE_FILE_FORMAT,
        SKIP_RO_SUFFIX,
        SUPPORT_TIMESTAMP,
        TABLE_PROPERTIES,
        SERDE_PROPERTIES,
        SYNC_AS_DATASOURCE,
        SCHEMA_STRING_LENGTH_THRESH,
        CREATE_MANAGED_TABLE,
        OMIT_METADATA_FIELDS,
        AUTO_CREATE_DATABASE,
        TABLE_STRATEGY,
        METASTORE_URIS,
        MODE,
        BATCH_NUM,
        SYNC_COMMENT,
        DECODE_PARTITION,
        INCREMENTAL,
        SNAPSHOT_WITH_TABLE_NAME,
        SPARK_VERSION,
        CONDITIONAL_SYNC,
        BASE_PATH,
    }
)

INPUT_FORMAT = "org.apache.hudi.hadoop.HoodieParquetInputFormat"
REALTIME_INPUT_FORMAT = "org.apache.hudi.hadoop.realtime.HoodieParquetRealtimeInputFormat"
OUTPUT_FORMAT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"

LAST_COMMIT_TIME_SYNC = "last_commit_time_sync"
LAST_COMMIT_COMPLETION_TIME_SYNC = "last_commit_completion_time_sync"
QUERY_AS_RO_TABLE = "hoodie.query.as.ro.table"
SERDE_PATH = "path"


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None or value == "":
        return default
    low = value.strip().lower()
    if low not in ("true", "false"):
        raise CatalogSyncError(f"{key}={value!r}: expected true or false")
    return low == "true"


def _int(options: Mapping[str, str], key: str, default: int) -> int:
    value = options.get(key)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise CatalogSyncError(f"{key}={value!r}: expected an integer") from None
    if number < 1:
        raise CatalogSyncError(f"{key}={value!r}: expected a positive integer")
    return number


def _to_map(text: str | None) -> dict[str, str]:
    """Hudi's ``ConfigUtils.toMap``: ``k=v`` per line."""
    out: dict[str, str] = {}
    for line in (text or "").split("\n"):
        line = line.strip()
        if not line:
            continue
        if "=" not in line:
            raise CatalogSyncError(f"bad property {line!r}: expected key=value")
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _split(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def check_options(options: Mapping[str, str]) -> None:
    """Refuse unknown ``hoodie.datasource.hive_sync.*`` / meta-sync keys (a typo would be silently ignored)."""
    for key in options:
        if key in KNOWN or key in IGNORED:
            continue
        if key.startswith((HS, "hoodie.meta.sync.", "hoodie.meta_sync.", "hoodie.datasource.meta")):
            raise CatalogSyncError(f"unknown sync option {key!r}")


def hive_location(path: str) -> str:
    """The location a metastore gets for a table at ``path``: an ``s3://`` lake is registered as
    ``s3a://``, the scheme of Hadoop's S3 file system that Spark, Hive and Trino's Hive connector
    read through (as Apache Hudi's tables written by Spark carry it); anything else as it is."""
    return "s3a://" + path[len("s3://") :] if path.startswith("s3://") else path


@dataclass(frozen=True)
class SyncConfig:
    database: str
    table: str
    base_path: str
    partition_fields: list[str]
    extractor_class: str
    decode_partition: bool = False
    skip_ro_suffix: bool = False
    support_timestamp: bool = False
    sync_as_datasource: bool = True
    schema_threshold: int = 4000
    create_managed_table: bool = False
    omit_metadata_fields: bool = False
    auto_create_database: bool = True
    table_strategy: str = "ALL"
    snapshot_with_table_name: bool = True
    incremental: bool = True
    conditional_sync: bool = False
    spark_version: str = ""
    batch_num: int = 1000
    table_properties: dict[str, str] = field(default_factory=dict)
    serde_properties: dict[str, str] = field(default_factory=dict)

    @classmethod
    def resolve(
        cls,
        table_props: Mapping[str, str],
        base_path: str,
        options: Mapping[str, str] | None = None,
        database: str | None = None,
        table: str | None = None,
    ) -> SyncConfig:
        """Options win over ``database``/``table`` arguments, which win over the table's properties."""
        opts = dict(options or {})
        check_options(opts)
        mode = opts.get(MODE, "hms").lower()
        if mode != "hms":
            raise CatalogSyncError(
                f"{MODE}={opts[MODE]!r}: only hms (the metastore's Thrift API) is supported"
            )
        fmt = opts.get(BASE_FILE_FORMAT, table_props.get("hoodie.table.base.file.format", "PARQUET")).upper()
        if fmt != "PARQUET":
            raise CatalogSyncError(f"base file format {fmt} is not supported (PARQUET only)")
        if _bool(opts, SYNC_COMMENT, False):
            raise CatalogSyncError(f"{SYNC_COMMENT}=true is not supported")
        strategy = opts.get(TABLE_STRATEGY, "ALL").upper()
        if strategy not in ("ALL", "RO", "RT"):
            raise CatalogSyncError(f"{TABLE_STRATEGY}={strategy!r}: expected RO, RT or ALL")
        db = opts.get(DATABASE) or database or table_props.get("hoodie.database.name") or "default"
        name = opts.get(TABLE) or table or table_props.get("hoodie.table.name")
        if not name:
            raise CatalogSyncError("no table name: the table has no hoodie.table.name; pass one")
        if PARTITION_FIELDS in opts:
            parts = _split(opts[PARTITION_FIELDS])
        else:
            parts = [p.split(":", 1)[0] for p in _split(table_props.get("hoodie.table.partition.fields"))]
        hive_style = (
            table_props.get("hoodie.datasource.write.hive_style_partitioning", "false").lower() == "true"
        )
        extractor = opts.get(PARTITION_EXTRACTOR_CLASS) or default_extractor_class(parts, hive_style)
        extractor_by_name(extractor)  # validate
        url_encoded = (
            table_props.get("hoodie.datasource.write.partitionpath.urlencode", "false").lower() == "true"
        )
        return cls(
            database=db.lower(),
            table=name.lower(),
            base_path=hive_location((opts.get(BASE_PATH) or base_path).rstrip("/") or "/"),
            partition_fields=parts,
            extractor_class=extractor,
            decode_partition=_bool(opts, DECODE_PARTITION, url_encoded),
            skip_ro_suffix=_bool(opts, SKIP_RO_SUFFIX, False),
            support_timestamp=_bool(opts, SUPPORT_TIMESTAMP, False),
            sync_as_datasource=_bool(opts, SYNC_AS_DATASOURCE, True),
            schema_threshold=_int(opts, SCHEMA_STRING_LENGTH_THRESH, 4000),
            create_managed_table=_bool(opts, CREATE_MANAGED_TABLE, False),
            omit_metadata_fields=_bool(opts, OMIT_METADATA_FIELDS, False),
            auto_create_database=_bool(opts, AUTO_CREATE_DATABASE, True),
            table_strategy=strategy,
            snapshot_with_table_name=_bool(opts, SNAPSHOT_WITH_TABLE_NAME, True),
            incremental=_bool(opts, INCREMENTAL, True),
            conditional_sync=_bool(opts, CONDITIONAL_SYNC, False),
            spark_version=opts.get(SPARK_VERSION, ""),
            batch_num=_int(opts, BATCH_NUM, 1000),
            table_properties=_to_map(opts.get(TABLE_PROPERTIES)),
            serde_properties=_to_map(opts.get(SERDE_PROPERTIES)),
        )

    def extract(self, partition_path: str) -> list[str]:
        from inlet.services.catalog_sync.partitions import unescape

        values = extractor_by_name(self.extractor_class)(partition_path)
        return [unescape(v) for v in values] if self.decode_partition else values
