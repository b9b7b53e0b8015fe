"""Per-table configuration (``--table-config FILE``) and creating/opening/registering a table.

The file is a JSON list; the first entry whose ``match`` (a glob on the table id, e.g.
``"dbserver1.public.*"``) matches configures the table::

    [{"match": "dbserver1.public.orders", "table_type": "COPY_ON_WRITE", "partition_by": ["region"]},
     {"match": "*", "table_type": "MERGE_ON_READ", "buckets": 8,
      "options": {"hoodie.compact.inline.max.delta.commits": "10"}}]

Defaults: Merge-on-Read, bucket index with 4 buckets, no partitioning. A table lives at
``<lake-root>/<database>/<schema>/<table>``; its record key is the primary key (key_position
order; a table without one is keyed by the event's record key in ``_inlet_record_key``), its
ordering field ``_event_lsn`` with EVENT_TIME_ORDERING. Merge-on-Read + bucket index tables use
non-blocking concurrency control (``hoodie.write.concurrency.mode`` in hoodie.properties, the
coordinator's NON_BLOCKING mode); other tables are OPTIMISTIC. A table partitioned by columns
outside its primary key is written with a global index: each batch finds where its keys are stored
(:func:`.lookup.batch_input`), so deletes, partition moves and TRUNCATE reach every partition.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inlet.core import HudiTable
from inlet.core.config import NBCC_MODE, TableConfig
from inlet.core.errors import TableExistsError
from inlet.core.storage import Storage
from inlet.core.table import properties as props_io
from inlet.services.coordinator_client.client import CoordinatorClient
from inlet.services.writer.rows import LSN_COL, PLACEHOLDER

TABLE_TYPES = {
    "MERGE_ON_READ": "MERGE_ON_READ",
    "MOR": "MERGE_ON_READ",
    "COPY_ON_WRITE": "COPY_ON_WRITE",
    "COW": "COPY_ON_WRITE",
}
INDEXES = ("bucket", "simple")
PARTIAL_UPDATE_PROPERTIES = {
    # Apache Hudi's FILL_UNAVAILABLE partial update with Debezium's TOAST placeholder
    "hoodie.table.partial.update.mode": "FILL_UNAVAILABLE",
    "hoodie.record.merge.property.partial.update.unavailable.value": PLACEHOLDER,
}


class TableConfigError(ValueError):
    pass


@dataclass(frozen=True)
class TableSettings:
    table_type: str = "MERGE_ON_READ"
    index: str = "bucket"
    buckets: int = 4
    partition_by: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)

    @property
    def nbcc(self) -> bool:
        return self.table_type == "MERGE_ON_READ" and self.index == "bucket"

    @property
    def concurrency_mode(self) -> str:
        return "NON_BLOCKING" if self.nbcc else "OPTIMISTIC"


@dataclass(frozen=True)
class TableRule:
    match: str
    settings: TableSettings


def _settings(entry: dict[str, Any], where: str) -> TableSettings:
    unknown = set(entry) - {"match", "table_type", "index", "buckets", "partition_by", "options"}
    if unknown:
        raise TableConfigError(f"{where}: unknown keys {sorted(unknown)}")
    ttype = str(entry.get("table_type", "MERGE_ON_READ")).upper()
    if ttype not in TABLE_TYPES:
        raise TableConfigError(f"{where}: table_type must be MERGE_ON_READ or COPY_ON_WRITE, not {ttype!r}")
    index = str(entry.get("index", "bucket")).lower()
    if index not in INDEXES:
        raise TableConfigError(f"{where}: index must be bucket or simple, not {index!r}")
    buckets = entry.get("buckets", 4)
    if not isinstance(buckets, int) or buckets < 1:
        raise TableConfigError(f"{where}: buckets must be a positive integer")
    parts = entry.get("partition_by", [])
    if isinstance(parts, str):
        parts = [parts]
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        raise TableConfigError(f"{where}: partition_by must be a list of column names")
    options = entry.get("options", {})
    if not isinstance(options, dict):
        raise TableConfigError(f"{where}: options must be an object of Hudi options")
    return TableSettings(
        TABLE_TYPES[ttype], index, buckets, tuple(parts), {str(k): str(v) for k, v in options.items()}
    )


def load_rules(path: str | None) -> list[TableRule]:
    if not path:
        return []
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise TableConfigError(f"--table-config {path}: {e}") from None
    if not isinstance(data, list):
        raise TableConfigError(f"--table-config {path}: expected a JSON list of table entries")
    rules = []
    for i, entry in enumerate(data):
        where = f"--table-config {path} entry {i}"
        if not isinstance(entry, dict) or not isinstance(entry.get("match"), str):
            raise TableConfigError(f'{where}: each entry needs a "match" glob')
        rules.append(TableRule(entry["match"], _settings(entry, where)))
    return rules


def settings_for(rules: Sequence[TableRule], table_id: str) -> TableSettings:
    for rule in rules:
        if fnmatch.fnmatchcase(table_id, rule.match):
            return rule.settings
    return TableSettings()


def table_path(lake_root: str, database: str, schema: str, table: str) -> str:
    for part in (database, schema, table):
        if not part or "/" in part or part in (".", ".."):
            raise TableConfigError(f"cannot place a table at {database!r}/{schema!r}/{table!r}")
    return f"{lake_root.rstrip('/')}/{database}/{schema}/{table}"


def hudi_name(table: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", table)
    return name if re.match(r"^[A-Za-z_]", name) else f"t_{name}"


def open_or_create(
    path: str, name: str, database: str, record_key: Sequence[str], settings: TableSettings
) -> None:
    """Create the table at ``path`` unless one exists (idempotent, also across workers)."""
    storage = Storage(path)
    if storage.exists(props_io.PROPERTIES_PATH):
        return
    extra = dict(PARTIAL_UPDATE_PROPERTIES)
    if settings.nbcc:
        extra[TableConfig.CONCURRENCY_MODE.key] = NBCC_MODE
    with contextlib.suppress(TableExistsError):
        HudiTable.create(
            path,
            name=name,
            record_key=list(record_key),
            partition_by=list(settings.partition_by) or None,
            table_type=settings.table_type,
            ordering_field=LSN_COL,
            merge_mode="EVENT_TIME_ORDERING",
            index=settings.index,
            buckets=settings.buckets,
            database=database or None,
            extra_properties=extra,
        )


def ensure_table(
    client: CoordinatorClient,
    table_id: str,
    lake_root: str,
    database: str,
    schema: str,
    table: str,
    record_key: Sequence[str],
    settings: TableSettings,
) -> str:
    """Create the table for ``table_id`` under ``lake_root`` unless it exists and register it with the
    coordinator (both idempotent); its path."""
    path = table_path(lake_root, database, schema, table)
    open_or_create(path, hudi_name(table), database, record_key, settings)
    client.register_table(table_id, path, mode=settings.concurrency_mode)
    return path
