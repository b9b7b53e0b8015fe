"""Register a Hudi table in a Hive Metastore exactly as Apache Hudi's HiveSyncTool (HMS mode) does.

One :func:`sync_table` call is one ``HiveSyncTool.syncHoodieTable()``:

* the metastore tables: Copy-on-Write -> ``<table>``; Merge-on-Read (``table.strategy=ALL``) ->
  ``<table>_ro`` (read-optimized, ``HoodieParquetInputFormat``, ``hoodie.query.as.ro.table=true``),
  ``<table>_rt`` (snapshot, ``HoodieParquetRealtimeInputFormat``) and, with
  ``hoodie.meta.sync.sync_snapshot_with_table_name=true`` (Hudi's default since 0.14), ``<table>`` as a second
  snapshot table; ``skip_ro_suffix`` names the read-optimized one ``<table>``; strategy ``RO``/``RT`` syncs only
  ``<table>`` of that kind;
* a new table is created as ``HMSDDLExecutor.createTable`` does: EXTERNAL table at the base path, columns from
  the storage schema without the partition fields (meta fields first), partition keys typed from the
  schema (``string`` when absent), Parquet output format and ``ParquetHiveSerDe`` with
  ``serialization.format=1``, serde properties ``path`` and ``hoodie.query.as.ro.table`` and table properties
  ``EXTERNAL=TRUE``, ``spark.sql.sources.provider=hudi`` and the Spark schema (``sync_as_datasource``);
* an existing table gets its schema difference (new columns, ``int``->``bigint``, ``float``->``double``,
  struct changes) applied by replacing its columns with ``CASCADE`` to partitions when partitioned, then its
  serde properties/formats and table properties refreshed when they differ;
* partitions: with no ``last_commit_time_sync`` on the table, or one before the active timeline starts, or
  ``hoodie.meta.sync.incremental=false``: every partition on storage is compared with every partition in the
  metastore (add missing, re-point moved, drop gone); else only the partitions written by commits completed
  since (``TimelineUtils.getCommitsTimelineAfter``, with the "hollow" commits that completed after
  ``last_commit_completion_time_sync``), dropping those whose latest ``delete_partition``/``insert_overwrite``
  replace came after their latest write (``TimelineUtils.getDroppedPartitions``);
* last: ``last_commit_time_sync`` (latest completed commit's instant) and ``last_commit_completion_time_sync``
  (latest completion time) table parameters, location and serde ``path`` set to the base path.

Differences from Hudi, on purpose: every schema difference is computed and checked for all the tables of a
sync before any change is made, and a column missing from the new schema is refused (Hudi would drop it);
partition values are URL-decoded for add and drop alike when ``decode_partition`` is on (Hudi decodes them
for drop only); "all partitions on storage" are the partitions with file groups visible in the latest
snapshot (what Hudi's metadata table lists) rather than every directory holding a ``.hoodie_partition_metadata``.
"""

from __future__ import annotations

import copy
import getpass
import logging
import posixpath
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from inlet.core import HudiTable
from inlet.core.file_group.view import FileSystemView
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.instant import Action, Instant
from inlet.services.catalog_sync import schema as sch
from inlet.services.catalog_sync.config import (
    INPUT_FORMAT,
    LAST_COMMIT_COMPLETION_TIME_SYNC,
    LAST_COMMIT_TIME_SYNC,
    OUTPUT_FORMAT,
    QUERY_AS_RO_TABLE,
    REALTIME_INPUT_FORMAT,
    SERDE,
    SERDE_PATH,
    SyncConfig,
)
from inlet.services.catalog_sync.errors import CatalogSyncError
from inlet.services.catalog_sync.metastore import MetastoreClient
from inlet.services.catalog_sync.partitions import partition_name

_log = logging.getLogger(__name__)

DELETE_PARTITION_OPERATIONS = frozenset({"delete_partition", "insert_overwrite", "insert_overwrite_table"})


@dataclass
class TableSyncResult:
    """What one sync changed in one metastore table."""

    name: str
    kind: str  # cow | ro | rt
    created: bool = False
    recreated: bool = False
    columns_added: list[str] = field(default_factory=list)
    columns_updated: list[str] = field(default_factory=list)
    serde_updated: bool = False
    properties_updated: bool = False
    partition_sync: str = "none"  # full | incremental | none
    partitions_added: list[str] = field(default_factory=list)
    partitions_updated: list[str] = field(default_factory=list)
    partitions_dropped: list[str] = field(default_factory=list)
    last_commit_time_sync: str | None = None
    last_commit_completion_time_sync: str | None = None

    @property
    def changed(self) -> bool:
        return bool(
            self.created
            or self.recreated
            or self.columns_added
            or self.columns_updated
            or self.serde_updated
            or self.properties_updated
            or self.partitions_added
            or self.partitions_updated
            or self.partitions_dropped
        )


@dataclass
class SyncReport:
    base_path: str
    database: str
    table_type: str
    database_created: bool = False
    tables: list[TableSyncResult] = field(default_factory=list)
    metastore_calls: dict[str, int] = field(default_factory=dict)
    elapsed_ms: int = 0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for t, src in zip(out["tables"], self.tables, strict=True):
            t["changed"] = src.changed
        return out


@dataclass(frozen=True)
class _Target:
    name: str
    realtime: bool
    read_optimized: bool

    @property
    def kind(self) -> str:
        if self.read_optimized:
            return "ro"
        return "rt" if self.realtime else "cow"


# -- the table's state as Hudi's sync client reads it ----------------------------------------------


class TableState:
    """What the sync needs from a Hudi table: schema, commits timeline, partitions."""

    def __init__(self, table: HudiTable) -> None:
        self.table = table
        self.timeline: Timeline = table.timeline
        # HoodieSyncClient.getActiveTimeline(): completed commits, deltacommits and replacecommits
        self.commits: list[Instant] = self.timeline.completed_writes()

    @property
    def table_type(self) -> str:
        return str(self.table.table_type.value)

    def last_commit(self) -> Instant | None:
        return self.commits[-1] if self.commits else None

    def latest_completion_time(self) -> str | None:
        times = [i.completion_time for i in self.commits if i.completion_time]
        return max(times) if times else None

    def avro_schema(self, include_meta: bool) -> dict[str, Any]:
        text = self.table.avro_schema()
        if not text:
            raise CatalogSyncError(
                f"{self.table.base_path} has no schema yet (no completed commit): nothing to register"
            )
        avro = sch.parse_avro(text)
        return sch.with_meta_fields(avro) if include_meta else sch.without_meta_fields(avro)

    def is_before_timeline_starts(self, instant_time: str) -> bool:
        return bool(self.commits) and instant_time < self.commits[0].time

    def commits_after(self, last_time: str, last_completion: str | None) -> list[Instant]:
        """``TimelineUtils.getCommitsTimelineAfter``: later commits plus earlier ones that completed later."""
        out = [i for i in self.commits if i.time > last_time]
        if last_completion is not None:
            hollow = [
                i
                for i in self.commits
                if i.time < last_time
                and i.completion_time is not None
                and i.completion_time > last_completion
            ]
            out = sorted(set(out) | set(hollow), key=lambda i: i.time)
        return out

    def written_partitions(self, instants: list[Instant]) -> list[str]:
        """``TimelineUtils.getWrittenPartitions``: written, and for replace commits also replaced."""
        seen: dict[str, None] = {}
        for inst in instants:
            md = self.timeline.commit_metadata(inst)
            parts = list(md.partition_to_write_stats)
            if inst.action == Action.REPLACE_COMMIT:
                parts = list(md.partition_to_replace_file_ids or {}) + parts
            for p in parts:
                if p:
                    seen.setdefault(p, None)
        return list(seen)

    def dropped_partitions(self, instants: list[Instant]) -> set[str]:
        """``TimelineUtils.getDroppedPartitions`` (replace commits of delete-partition kinds)."""
        latest_delete: dict[str, str] = {}
        for inst in instants:
            if inst.action != Action.REPLACE_COMMIT:
                continue
            md = self.timeline.commit_metadata(inst)
            if (md.operation_type or "").lower() in DELETE_PARTITION_OPERATIONS:
                for p in md.partition_to_replace_file_ids or {}:
                    latest_delete[p] = inst.time
        if not latest_delete:
            return set()
        earliest = min(latest_delete.values())
        latest_write: dict[str, str] = {}
        for inst in instants:
            if inst.time >= earliest:
                # a partition with an empty stats list was not written (Inlet's delete_partition commits
                # list the dropped partitions so; Hudi's leave them out)
                for p, stats in self.timeline.commit_metadata(inst).partition_to_write_stats.items():
                    if stats:
                        latest_write[p] = inst.time
        return {p for p, t in latest_delete.items() if p and (p not in latest_write or t > latest_write[p])}

    def all_partitions(self) -> list[str]:
        """Partitions with visible file groups in the latest snapshot (what Hudi's metadata table lists)."""
        return [p for p in FileSystemView(self.timeline).partitions() if p]


# -- helpers ------------------------------------------------------------------------------------------


def _path_only(location: str) -> str:
    """``Path.getPathWithoutSchemeAndAuthority(p).toUri().getPath()``."""
    parsed = urllib.parse.urlparse(location)
    path = parsed.path if parsed.scheme else location
    return path.rstrip("/") or "/"


def _partition_location(base_path: str, partition: str) -> str:
    """``FSUtils.getPartitionPath(basePath, partition).toString()``."""
    return posixpath.join(base_path, partition) if partition else base_path


def _contains_all(remote: Mapping[str, str] | None, wanted: Mapping[str, str]) -> bool:
    remote = remote or {}
    return all(remote.get(k) == v for k, v in wanted.items())


class HiveSync:
    """One sync of one Hudi table into one metastore (``HiveSyncTool`` + ``HoodieHiveSyncClient``)."""

    def __init__(self, table: HudiTable, client: MetastoreClient, config: SyncConfig) -> None:
        self.state = TableState(table)
        self.client = client
        self.cfg = config
        self.db = config.database

    # -- names ------------------------------------------------------------------------------------

    def targets(self) -> list[_Target]:
        """``HiveSyncTool.initTableNameVars`` / ``doSync``."""
        name = self.cfg.table
        if self.state.table_type == "COPY_ON_WRITE":
            return [_Target(name, False, False)]
        if self.cfg.table_strategy == "RO":
            return [_Target(name, False, True)]
        if self.cfg.table_strategy == "RT":
            return [_Target(name, True, False)]
        ro = name if self.cfg.skip_ro_suffix else f"{name}_ro"
        out = [_Target(ro, False, True), _Target(f"{name}_rt", True, False)]
        if self.cfg.snapshot_with_table_name and ro != name:
            out.append(_Target(name, True, False))
        return out

    # -- what the tables should look like ---------------------------------------------------------

    def storage_fields(self) -> list[sch.PType]:
        return sch.avro_to_parquet(self.state.avro_schema(not self.cfg.omit_metadata_fields))

    def columns(self, fields: list[sch.PType]) -> list[tuple[str, str]]:
        return sch.hive_columns(fields, self.cfg.support_timestamp)

    def serde_properties(self, read_optimized: bool) -> dict[str, str]:
        props = dict(self.cfg.serde_properties)
        if self.cfg.sync_as_datasource:
            props[SERDE_PATH] = self.cfg.base_path
            props[QUERY_AS_RO_TABLE] = "true" if read_optimized else "false"
        return props

    def table_properties(self, fields: list[sch.PType]) -> dict[str, str]:
        props = dict(self.cfg.table_properties)
        if self.cfg.sync_as_datasource:
            props.update(
                sch.spark_table_properties(
                    fields, self.cfg.partition_fields, self.cfg.spark_version, self.cfg.schema_threshold
                )
            )
        return props

    # -- the sync ---------------------------------------------------------------------------------

    def run(self) -> SyncReport:
        started = time.monotonic()
        cfg = self.cfg
        report = SyncReport(cfg.base_path, self.db, self.state.table_type)
        fields = self.storage_fields()
        columns = self.columns(fields)
        targets = self.targets()
        report.database_created = self._ensure_database()
        existing = {t.name: self._get_table(t.name) for t in targets}
        # plan every table first: a refused schema change leaves the catalog untouched
        diffs: dict[str, sch.SchemaDifference] = {}
        for t in targets:
            tbl = existing[t.name]
            if tbl is not None and _path_only(tbl.sd.location) == _path_only(cfg.base_path):
                diffs[t.name] = sch.schema_difference(
                    columns, self._metastore_schema(tbl), cfg.partition_fields, f"{self.db}.{t.name}"
                )
        for t in targets:
            report.tables.append(self._sync_one(t, existing[t.name], diffs.get(t.name), fields, columns))
        report.metastore_calls = dict(self.client.calls)
        report.elapsed_ms = int((time.monotonic() - started) * 1000)
        return report

    def _sync_one(
        self,
        target: _Target,
        tbl: Any,
        diff: sch.SchemaDifference | None,
        fields: list[sch.PType],
        columns: list[tuple[str, str]],
    ) -> TableSyncResult:
        res = TableSyncResult(target.name, target.kind)
        if tbl is not None and diff is None:
            # the table points elsewhere: HiveSyncTool recreates it at the base path
            _log.info(
                "%s.%s points at %s, recreating it at %s",
                self.db,
                target.name,
                tbl.sd.location,
                self.cfg.base_path,
            )
            self.client.call("drop_table", self.db, target.name, False)
            tbl = None
            res.recreated = True
        if tbl is None:
            self._create_table(target, fields, columns)
            res.created = not res.recreated
            schema_changed = properties_changed = True
        else:
            schema_changed = False
            if diff is not None and not diff.is_empty:
                self._update_columns(target.name, columns)
                res.columns_added = [n for n, _ in diff.added]
                res.columns_updated = [n for n, _, _ in diff.updated]
                schema_changed = True
            res.serde_updated = self._update_serde(target)
            res.properties_updated = self._update_table_properties(target.name, self.table_properties(fields))
            properties_changed = res.serde_updated or res.properties_updated
        partitions_changed = self._sync_partitions(target.name, exists=tbl is not None, res=res)
        if not self.cfg.conditional_sync or schema_changed or properties_changed or partitions_changed:
            self._update_last_commit_time(target.name, res)
        return res

    # -- database and tables ----------------------------------------------------------------------

    def _ensure_database(self) -> bool:
        from hmsclient.genthrift.hive_metastore.ttypes import (
            AlreadyExistsException,
            Database,
            NoSuchObjectException,
        )

        try:
            self.client.call("get_database", self.db)
            return False
        except NoSuchObjectException:
            pass
        if not self.cfg.auto_create_database:
            raise CatalogSyncError(f"hive database does not exist {self.db}") from None
        try:
            self.client.call(
                "create_database", Database(self.db, "automatically created by hoodie", None, None)
            )
        except AlreadyExistsException:
            return False
        return True

    def _get_table(self, name: str) -> Any:
        from hmsclient.genthrift.hive_metastore.ttypes import NoSuchObjectException

        try:
            return self.client.get_table(self.db, name)
        except NoSuchObjectException:
            return None

    @staticmethod
    def _metastore_schema(tbl: Any) -> dict[str, str]:
        """``HMSDDLExecutor.getTableSchema``: columns and partition keys, name -> type."""
        out = {c.name: c.type for c in tbl.sd.cols or []}
        out.update({c.name: c.type for c in tbl.partitionKeys or []})
        return out

    def _field_schemas(self, columns: list[tuple[str, str]]) -> list[Any]:
        from hmsclient.genthrift.hive_metastore.ttypes import FieldSchema

        parts = set(self.cfg.partition_fields)
        return [FieldSchema(n, t, "") for n, t in columns if n not in parts]

    def _create_table(self, target: _Target, fields: list[sch.PType], columns: list[tuple[str, str]]) -> None:
        """``HMSDDLExecutor.createTable``."""
        from hmsclient.genthrift.hive_metastore.ttypes import FieldSchema, SerDeInfo, StorageDescriptor, Table

        types = dict(columns)
        partition_keys = [
            FieldSchema(p, types.get(p, "string").lower(), "") for p in self.cfg.partition_fields
        ]
        serde_props = self.serde_properties(target.read_optimized)
        serde_props["serialization.format"] = "1"
        sd = StorageDescriptor(
            cols=self._field_schemas(columns),
            location=self.cfg.base_path,
            inputFormat=REALTIME_INPUT_FORMAT if target.realtime else INPUT_FORMAT,
            outputFormat=OUTPUT_FORMAT,
            serdeInfo=SerDeInfo(None, SERDE, serde_props),
        )
        params: dict[str, str] = {}
        if not self.cfg.create_managed_table:
            params["EXTERNAL"] = "TRUE"
        params.update(self.table_properties(fields))
        table = Table(
            tableName=target.name,
            dbName=self.db,
            owner=getpass.getuser(),
            createTime=int(time.time()),
            sd=sd,
            partitionKeys=partition_keys,
            parameters=params,
            tableType="EXTERNAL_TABLE",
        )
        self.client.call("create_table", table)

    def _update_columns(self, name: str, columns: list[tuple[str, str]]) -> None:
        """``HMSDDLExecutor.updateTableDefinition``: replace the columns, CASCADE when partitioned."""
        from hmsclient.genthrift.hive_metastore.ttypes import EnvironmentContext

        tbl = self.client.get_table(self.db, name)
        tbl.sd.cols = self._field_schemas(columns)
        context = EnvironmentContext({"CASCADE": "true"} if self.cfg.partition_fields else {})
        self.client.call("alter_table_with_environment_context", self.db, name, tbl, context)

    def _update_serde(self, target: _Target) -> bool:
        """``HoodieHiveSyncClient.updateSerdeProperties`` (also fixes input/output formats)."""
        from hmsclient.genthrift.hive_metastore.ttypes import SerDeInfo

        wanted = self.serde_properties(target.read_optimized)
        if not wanted:
            return False
        wanted.setdefault("serialization.format", "1")
        tbl = self.client.get_table(self.db, target.name)
        sd = tbl.sd
        remote = sd.serdeInfo
        update = remote is None or not _contains_all(remote.parameters, wanted)
        input_format = REALTIME_INPUT_FORMAT if target.realtime else INPUT_FORMAT
        update = update or sd.inputFormat != input_format or sd.outputFormat != OUTPUT_FORMAT
        if not update:
            return False
        sd.inputFormat = input_format
        sd.outputFormat = OUTPUT_FORMAT
        sd.serdeInfo = SerDeInfo(remote.name if remote is not None else None, SERDE, wanted)
        self.client.call("alter_table", self.db, target.name, tbl)
        return True

    def _update_table_properties(self, name: str, wanted: dict[str, str]) -> bool:
        """``HoodieHiveSyncClient.updateTableProperties``."""
        if not wanted:
            return False
        tbl = self.client.get_table(self.db, name)
        if _contains_all(tbl.parameters, wanted):
            return False
        tbl.parameters = {**(tbl.parameters or {}), **wanted}
        self.client.call("alter_table", self.db, name, tbl)
        return True

    def _update_last_commit_time(self, name: str, res: TableSyncResult) -> None:
        """``HoodieHiveSyncClient.updateLastCommitTimeSynced``."""
        last = self.state.last_commit()
        if last is None:
            return
        completion = self.state.latest_completion_time()
        tbl = self.client.get_table(self.db, name)
        tbl.sd.location = self.cfg.base_path
        if tbl.sd.serdeInfo.parameters is None:
            tbl.sd.serdeInfo.parameters = {}
        tbl.sd.serdeInfo.parameters[SERDE_PATH] = self.cfg.base_path
        params = dict(tbl.parameters or {})
        params[LAST_COMMIT_TIME_SYNC] = last.time
        if completion is not None:
            params[LAST_COMMIT_COMPLETION_TIME_SYNC] = completion
        tbl.parameters = params
        self.client.call("alter_table", self.db, name, tbl)
        res.last_commit_time_sync = last.time
        res.last_commit_completion_time_sync = completion

    # -- partitions -------------------------------------------------------------------------------

    def _sync_partitions(self, name: str, exists: bool, res: TableSyncResult) -> bool:
        if not self.cfg.partition_fields:
            return False
        tbl = self.client.get_table(self.db, name)
        params = tbl.parameters or {}
        last = params.get(LAST_COMMIT_TIME_SYNC) if exists and self.cfg.incremental else None
        last_completion = (
            params.get(LAST_COMMIT_COMPLETION_TIME_SYNC) if exists and self.cfg.incremental else None
        )
        if last is None or self.state.is_before_timeline_starts(last):
            res.partition_sync = "full"
            in_metastore = self.client.call("get_partitions", self.db, name, -1)
            events = self._events_all(in_metastore, self.state.all_partitions())
        else:
            res.partition_sync = "incremental"
            since = self.state.commits_after(last, last_completion)
            written = self.state.written_partitions(since)
            if not written:
                return False
            dropped = self.state.dropped_partitions(since)
            names = []
            for p in written:
                values = self.cfg.extract(p)
                if values:
                    names.append(partition_name(self.cfg.partition_fields, values))
            in_metastore = self.client.call("get_partitions_by_names", self.db, name, names) if names else []
            events = self._events_written(in_metastore, written, dropped)
        return self._apply_events(tbl, events, res)

    def _paths_by_values(self, partitions: list[Any]) -> dict[str, str]:
        return {", ".join(p.values): _path_only(p.sd.location) for p in partitions}

    def _events_all(self, in_metastore: list[Any], on_storage: list[str]) -> list[tuple[str, str]]:
        """``HoodieSyncClient.getPartitionEvents(all in metastore, all on storage)``."""
        paths = self._paths_by_values(in_metastore)
        to_drop = dict(paths)
        events = []
        for p in on_storage:
            values = self.cfg.extract(p)
            if not values:
                continue
            key = ", ".join(values)
            to_drop.pop(key, None)
            if key not in paths:
                events.append(("add", p))
            elif paths[key] != _path_only(_partition_location(self.cfg.base_path, p)):
                events.append(("update", p))
        base = _path_only(self.cfg.base_path)
        for location in to_drop.values():
            if location.startswith(base + "/"):
                events.append(("drop", location[len(base) + 1 :]))
            else:
                _log.error("cannot parse the path stored in the metastore, not dropping it: %s", location)
        return events

    def _events_written(
        self, in_metastore: list[Any], written: list[str], dropped: set[str]
    ) -> list[tuple[str, str]]:
        """``HoodieSyncClient.getPartitionEvents(partitions, written since, dropped since)``."""
        paths = self._paths_by_values(in_metastore)
        events = []
        for p in written:
            if p in dropped:
                events.append(("drop", p))
                continue
            values = self.cfg.extract(p)
            if not values:
                continue
            key = ", ".join(values)
            if key not in paths:
                events.append(("add", p))
            elif paths[key] != _path_only(_partition_location(self.cfg.base_path, p)):
                events.append(("update", p))
        return events

    def _apply_events(self, tbl: Any, events: list[tuple[str, str]], res: TableSyncResult) -> bool:
        from hmsclient.genthrift.hive_metastore.ttypes import AddPartitionsRequest, Partition

        name = tbl.tableName
        adds = [p for kind, p in events if kind == "add"]
        updates = [p for kind, p in events if kind == "update"]
        drops = [p for kind, p in events if kind == "drop"]

        def partition_of(p: str) -> Any:
            sd = copy.deepcopy(tbl.sd)
            sd.location = _partition_location(self.cfg.base_path, p)
            sd.parameters = None
            return Partition(self.cfg.extract(p), self.db, name, 0, 0, sd, None)

        # HMSDDLExecutor.addPartitionsToTable: the table's columns, formats and serde, ifNotExists
        for i in range(0, len(adds), self.cfg.batch_num):
            batch = [partition_of(p) for p in adds[i : i + self.cfg.batch_num]]
            self.client.call("add_partitions_req", AddPartitionsRequest(self.db, name, batch, True, False))
        if updates:
            self.client.call("alter_partitions", self.db, name, [partition_of(p) for p in updates])
        for p in drops:
            values = self.cfg.extract(p)
            part_name = partition_name(self.cfg.partition_fields, values)
            self.client.call("drop_partition_by_name", self.db, name, part_name, False)
        res.partitions_added, res.partitions_updated, res.partitions_dropped = adds, updates, drops
        return bool(adds or updates or drops)


def sync_table(
    path: str,
    client: MetastoreClient,
    *,
    database: str | None = None,
    table: str | None = None,
    options: Mapping[str, str] | None = None,
) -> SyncReport:
    """Sync the Hudi table at ``path`` into the metastore behind ``client`` (see the module docstring)."""
    hudi = HudiTable.open(path)
    base = hudi.storage.base_uri.rstrip("/") or "/"
    config = SyncConfig.resolve(hudi.props, base, options, database, table)
    return HiveSync(hudi, client, config).run()
