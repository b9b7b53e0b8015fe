"""Step 3 of a write, execute: one :func:`write_file_group` per file group (marker, then the new base file: stored records merged with incoming ones, inserts appended) or :func:`write_log_group` (one new log file, blocks encoded by :mod:`inlet.core.log.writer`); each returns a write stat. Plain-value contexts, so a Spark executor runs the same code."""

from __future__ import annotations

import json
import posixpath
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from inlet.core.commit import markers
from inlet.core.config import CdcLoggingMode, MergeMode
from inlet.core.file_group.view import (
    PARTITION_METADATA_FILE,
    base_file_name,
    log_file_name,
    write_token,
)
from inlet.core.index.simple import LOG_KEYS, one_array
from inlet.core.keys import KeyGenerator
from inlet.core.log import writer as logs
from inlet.core.merge import dedupe as merging
from inlet.core.merge.log_events import marker_mask
from inlet.core.s3 import S3Options
from inlet.core.schema import (
    META_COLUMNS,
    cast_to,
    meta_schema,
)
from inlet.core.storage import Storage
from inlet.core.timeline.commit_metadata import WriteStat
from inlet.core.write import cdc_log
from inlet.core.write.file_groups import FileGroupWrite, without_deletes
from inlet.core.write.prepare import DELETED, KEY, PARTITION


@dataclass(frozen=True)
class WriteContext:
    """What a file-group writer needs; plain values so an executor process can receive it."""

    base_uri: str
    table_name: str
    instant_time: str
    schema: pa.Schema
    avro_schema: str
    merge_mode: MergeMode
    ordering_field: str | None
    key_generator: KeyGenerator
    populate_meta_fields: bool = True
    compression: str = "snappy"
    data_block_format: logs.DataBlockFormat = logs.DataBlockFormat.AVRO
    table_merge_mode: MergeMode | None = None  # the table's mode (merge_mode is per operation)
    # keep the keys of written log files for the next simple-index lookup (see LogKeyCache)
    cache_log_keys: bool = True
    # a CDC-enabled table's supplemental logging mode: merges also write a CDC log (write.cdc_log)
    cdc_mode: CdcLoggingMode | None = None
    # the partial-update placeholder (Debezium's unchanged TOAST value): an incoming string or bytes
    # value equal to it takes the value of the stored record it replaces (None: no partial updates)
    unavailable_value: str | None = None
    # where the table's store is when it is on S3 (endpoint, region, credentials, addressing), so an
    # executor on another machine reaches the store the driver writes to, whatever its environment
    s3: S3Options | None = None

    def storage(self) -> Storage:
        """The table's storage, as the driver reaches it (an executor's own environment is not read)."""
        return Storage(self.base_uri, s3=self.s3)


def _meta(n: int, value: str) -> pa.Array:
    return pa.repeat(pa.scalar(value, pa.string()), n)


def _seqnos(instant_time: str, task_id: int, n: int, start: int = 0) -> pa.Array:
    """``_hoodie_commit_seqno`` of ``n`` new records: ``<instant>_<task>_<start + i>``."""
    numbers = pa.array(np.arange(start, start + n, dtype=np.int64)).cast(pa.string())
    return pc.binary_join_element_wise(f"{instant_time}_{task_id}_", numbers, "")


def _meta_columns(ctx: WriteContext, fresh: pa.Table, seq: pa.Array, name: str) -> list[pa.Array]:
    """The five meta columns of newly written records (only the file name without meta fields)."""
    n = fresh.num_rows
    if not ctx.populate_meta_fields:
        return [pa.nulls(n, pa.string())] * 4 + [_meta(n, name)]
    return [_meta(n, ctx.instant_time), seq, fresh.column(KEY), fresh.column(PARTITION), _meta(n, name)]


def write_file_group(
    storage: Storage,
    ctx: WriteContext,
    fg: FileGroupWrite,
    task_id: int,
    attempt: int = 0,
    stage_id: int = 0,
    seq_start: int = 0,
) -> WriteStat:
    """Write the new base file of one file group; returns its write stat.

    Upserts and deletes merge each stored record with the incoming record of its key (the
    merge mode decides; a key stored twice is merged twice, as Apache Hudi's merge handle does).
    An incoming record that replaces a stored one keeps the stored value of every string or bytes
    column where it holds ``ctx.unavailable_value`` (Hudi's ``FILL_UNAVAILABLE`` partial update, as
    ``PostgresDebeziumAvroPayload`` does for Debezium's unchanged TOAST values; Merge-on-Read reads
    and compactions fill the same way, see :mod:`inlet.core.merge.records`).
    Inserts (``fg.concat``) keep every stored record and append the incoming ones.

    The file is named with the write token ``<task_id>-<stage_id>-<attempt>`` (distinct attempts
    of one task write distinct files); new records get sequence numbers
    ``<instant>_<task_id>_<seq_start + i>``.
    """
    started = time.monotonic()
    token = write_token(task_id, stage_id, attempt)
    name = base_file_name(fg.file_id, token, ctx.instant_time)
    rel = posixpath.join(fg.partition, name) if fg.partition else name
    full_schema = pa.schema(list(meta_schema()) + list(ctx.schema))
    incoming = fg.records
    deleted_flags = np.asarray(incoming.column(DELETED).to_numpy(zero_copy_only=False), dtype=bool)

    kept = None
    existing: pa.Table | None = None
    before = None  # stored records this merge replaces (the CDC before images)
    num_updates = num_deletes = 0
    write_new = ~deleted_flags  # incoming records written as new records
    updates = np.zeros(0, dtype=np.int64)  # incoming positions written over stored records
    replaced = np.zeros(0, dtype=np.int64)  # ... and the stored positions they replace
    if fg.base_file is not None:
        existing = storage.read_parquet(fg.base_file.path)
        existing = cast_to(existing, full_schema)
        if not ctx.populate_meta_fields:
            existing = existing.set_column(2, full_schema.field(2), ctx.key_generator.record_keys(existing))
        replaced_rows = np.zeros(existing.num_rows, dtype=bool)
        if not fg.concat:
            # merge every stored record with the incoming record of its key (incoming keys are
            # unique here: upserts and deletes are deduplicated; were one given twice, its last
            # record would count); a key stored twice is merged twice
            ex_match = _last_position(existing.column(KEY), incoming.column(KEY))
            ex_idx = np.nonzero(ex_match >= 0)[0]
            win = np.ones(len(ex_idx), dtype=bool)
            if len(ex_idx) and not fg.explicit_deletes and ctx.ordering_field:
                stored = existing.column(ctx.ordering_field).take(pa.array(ex_idx))
                inc = incoming.column(ctx.ordering_field).take(pa.array(ex_match[ex_idx]))
                win = merging.incoming_wins(ctx.merge_mode, stored, inc)
            replaced_rows[ex_idx[win]] = True
            winners = ex_match[ex_idx[win]]
            updates = winners[~deleted_flags[winners]]
            replaced = ex_idx[win][~deleted_flags[winners]]
            num_updates = len(updates)
            num_deletes = int(deleted_flags[winners].sum())
            write_new[ex_match[ex_idx]] = False  # matched a stored record: never a new record
        kept = existing.filter(pa.array(~replaced_rows))
        if ctx.cdc_mode is not None:
            before = cdc_log.changed_rows(existing, replaced_rows)
        if not ctx.populate_meta_fields:  # keys were only recomputed to merge; stored as null
            kept = kept.set_column(2, full_schema.field(2), pa.nulls(kept.num_rows, pa.string()))
    num_inserts = int(write_new.sum())
    updated = incoming.take(pa.array(updates))
    if existing is not None and len(updates) and ctx.unavailable_value is not None:
        updated = _fill_unavailable(updated, existing.take(pa.array(replaced)), ctx)
    fresh = pa.concat_tables([updated, incoming.filter(pa.array(write_new))])

    n = fresh.num_rows
    seq = _seqnos(ctx.instant_time, task_id, n, seq_start)
    if n:
        fresh_meta = pa.Table.from_arrays(
            _meta_columns(ctx, fresh, seq, name) + [fresh.column(f.name) for f in ctx.schema],
            schema=full_schema,
        )
    else:
        fresh_meta = full_schema.empty_table()
    parts = [fresh_meta]
    if kept is not None and kept.num_rows:
        kept = kept.set_column(4, full_schema.field(4), _meta(kept.num_rows, name))
        parts.insert(0, kept)
    out = pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    markers.create_marker(
        storage, ctx.instant_time, fg.partition, name, "MERGE" if fg.base_file else "CREATE"
    )
    size = write_base_file(storage, rel, out, ctx.avro_schema, ctx.compression, ctx.populate_meta_fields)
    cdc_stats = None
    if before is not None and ctx.cdc_mode is not None:
        cdc_stats = cdc_log.write_cdc_log(
            storage,
            mode=ctx.cdc_mode,
            instant_time=ctx.instant_time,
            table_schema=ctx.avro_schema,
            partition=fg.partition,
            file_id=fg.file_id,
            token=token,
            key_column=KEY,
            data=ctx.schema,
            before=before,
            after=fresh,
        )
    elapsed = int((time.monotonic() - started) * 1000)
    return WriteStat(
        file_id=fg.file_id,
        path=rel,
        partition_path=fg.partition,
        prev_commit=fg.base_file.instant_time if fg.base_file else "null",
        num_writes=out.num_rows,
        num_deletes=num_deletes,
        num_update_writes=num_updates,
        num_inserts=num_inserts,
        total_write_bytes=size,
        file_size_in_bytes=size,
        prev_base_file=fg.base_file.name if fg.base_file else None,
        runtime_stats={
            "totalScanTime": 0,
            "totalCreateTime": 0 if fg.base_file else elapsed,
            "totalUpsertTime": elapsed if fg.base_file else 0,
        },
        cdc_stats=cdc_stats or None,
    )


def _fill_unavailable(updated: pa.Table, stored: pa.Table, ctx: WriteContext) -> pa.Table:
    """``updated`` (incoming records, each replacing the stored record in the same row of
    ``stored``) with the stored value wherever a string or bytes column holds the placeholder."""
    assert ctx.unavailable_value is not None
    for f in ctx.schema:
        if f.name not in updated.column_names or f.name not in stored.column_names:
            continue
        col = updated.column(f.name)
        mask = marker_mask(col, ctx.unavailable_value)
        if mask is None or not pc.any(mask).as_py():
            continue
        filled = pc.if_else(mask, stored.column(f.name).cast(col.type), col)
        updated = updated.set_column(updated.column_names.index(f.name), updated.field(f.name), filled)
    return updated


def _last_position(stored: pa.ChunkedArray, incoming: pa.ChunkedArray) -> np.ndarray:
    """For each stored key, the position of its last occurrence among the incoming keys (-1: none)."""
    n = len(incoming)
    if n == 0:
        return np.full(len(stored), -1, dtype=np.int64)
    backwards = one_array(incoming).take(pa.array(np.arange(n - 1, -1, -1, dtype=np.int64)))
    found = pc.index_in(stored, value_set=backwards)  # first match from the end = last occurrence
    return np.asarray(pc.subtract(n - 1, found).fill_null(-1).to_numpy(), dtype=np.int64)


def write_log_group(
    storage: Storage,
    ctx: WriteContext,
    fg: FileGroupWrite,
    task_id: int,
    attempt: int = 0,
    stage_id: int = 0,
    seq_start: int = 0,
) -> WriteStat:
    """Append one file group's share of a Merge-on-Read write as a new log file; returns its write stat.

    The file (``.<fileId>_<instant>.log.1_<token>``) holds a data block with the upserted records
    (meta columns: this instant, a new sequence number, the key, the partition and the file id) and a
    delete block with the deleted keys, in that order, as Apache Hudi's append handle writes them.
    Deletes of the ``delete`` operation carry Hudi's default ordering value (they win regardless of
    ordering); ``_hoodie_is_deleted`` records under EVENT_TIME_ORDERING carry their ordering value.
    """
    started = time.monotonic()
    token = write_token(task_id, stage_id, attempt)
    name = log_file_name(fg.file_id, ctx.instant_time, 1, token)
    rel = posixpath.join(fg.partition, name) if fg.partition else name
    schema_json = avro_with_meta(ctx.avro_schema)
    incoming = fg.records
    upserts = without_deletes(incoming)
    removals = incoming.filter(incoming.column(DELETED)) if upserts is not incoming else incoming.slice(0, 0)

    blocks: list[bytes] = []
    block_keys: list[pa.ChunkedArray] = []
    n = upserts.num_rows
    if n:
        full_schema = pa.schema(list(meta_schema()) + list(ctx.schema))
        seq = _seqnos(ctx.instant_time, task_id, n, seq_start)
        meta = [_meta(n, ctx.instant_time), seq, upserts.column(KEY), upserts.column(PARTITION)]
        records = pa.Table.from_arrays(
            [*meta, _meta(n, fg.file_id)] + [upserts.column(f.name) for f in ctx.schema], schema=full_schema
        )
        blocks.append(
            logs.data_block(records, ctx.instant_time, schema_json, ctx.data_block_format, ctx.compression)
        )
        block_keys.append(upserts.column(KEY))
    if removals.num_rows:
        ordering = ctx.ordering_field
        typed = (
            not fg.explicit_deletes
            and ctx.table_merge_mode is MergeMode.EVENT_TIME_ORDERING
            and ordering is not None
            and ordering in removals.column_names
        )
        values = removals.column(ordering) if typed and ordering else None
        blocks.append(
            logs.delete_block_columns(
                removals.column(KEY), removals.column(PARTITION), values, ctx.instant_time, schema_json
            )
        )
        block_keys.append(removals.column(KEY))

    markers.create_marker(storage, ctx.instant_time, fg.partition, name, "APPEND")
    size = logs.write_log_file(storage, rel, blocks)
    if ctx.cache_log_keys:
        LOG_KEYS.put(storage, rel, b"".join(blocks), block_keys)
    elapsed = int((time.monotonic() - started) * 1000)
    return WriteStat(
        file_id=fg.file_id,
        path=rel,
        partition_path=fg.partition,
        # table version 8: the append handle no longer looks up the file slice (log files are named
        # by the deltacommit), so prevCommit is the deltacommit itself and baseFile is empty
        prev_commit=ctx.instant_time,
        num_writes=n,
        num_deletes=removals.num_rows,
        num_update_writes=n if fg.tagged else 0,
        num_inserts=0 if fg.tagged else n,
        total_write_bytes=size,
        file_size_in_bytes=size,
        base_file="",
        log_files=[name],
        log_version=1,
        log_offset=0,
        runtime_stats={"totalScanTime": 0, "totalCreateTime": 0, "totalUpsertTime": elapsed},
    )


def avro_with_meta(avro_schema: str) -> str:
    """The table's Avro schema with the ``_hoodie_*`` meta fields first (optional strings), as a
    base file's ``parquet.avro.schema`` and a log block's schema header hold it."""
    rec = json.loads(avro_schema)
    meta = [{"name": c, "type": ["null", "string"], "doc": "", "default": None} for c in META_COLUMNS]
    rec["fields"] = meta + [f for f in rec["fields"] if f.get("name") not in META_COLUMNS]
    return json.dumps(rec, separators=(",", ":"))


def write_base_file(
    storage: Storage, rel: str, rows: pa.Table, avro_schema: str, compression: str, key_bounds: bool = True
) -> int:
    """Write ``rows`` (meta columns first) as a Hudi base file at ``rel``: the Avro schema with its
    meta fields in the footer, and with ``key_bounds`` the min/max record key; returns its size."""
    md: dict[bytes | str, bytes | str] = {
        "parquet.avro.schema": avro_with_meta(avro_schema),
        "writer.model.name": "avro",
    }
    if rows.num_rows and key_bounds:
        keys = rows.column(KEY)
        md["hoodie_min_record_key"] = pc.min(keys).as_py()
        md["hoodie_max_record_key"] = pc.max(keys).as_py()
    pq.write_table(
        rows.replace_schema_metadata(md), storage.full(rel), filesystem=storage.fs, compression=compression
    )
    return storage.fs.get_file_info(storage.full(rel)).size or 0


def ensure_partition_metadata(storage: Storage, partition: str, instant_time: str) -> None:
    rel = posixpath.join(partition, PARTITION_METADATA_FILE) if partition else PARTITION_METADATA_FILE
    if storage.exists(rel):
        return
    depth = len(partition.split("/")) if partition else 0
    body = f"#partition metadata\ncommitTime={instant_time}\npartitionDepth={depth}\n"
    storage.write_atomic(rel, body.encode())
