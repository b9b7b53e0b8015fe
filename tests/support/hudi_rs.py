"""Reads by the independent ``hudi`` reader (hudi-rs 0.5.0), with either of its file-group readers."""

from __future__ import annotations

import pyarrow as pa
from hudi import HudiReadOptions, HudiTable, HudiTableBuilder

READER_VERSIONS = ("1", "2")


def table(
    path: str, version: str, read_optimized: bool = False, storage_options: dict[str, str] | None = None
) -> HudiTable:
    b = HudiTableBuilder.from_base_uri(path).with_hudi_option(
        "hoodie.read.file.group.reader.version", version
    )
    if storage_options:
        b = b.with_storage_options(storage_options)
    if read_optimized:
        b = b.with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
    return b.build()


def read(
    path: str,
    version: str,
    as_of: str | None = None,
    read_optimized: bool = False,
    storage_options: dict[str, str] | None = None,
) -> pa.Table | None:
    """A snapshot (or ``as_of``) read; None when hudi-rs returns no batches (an empty table).

    hudi-rs returns each file's batches with that file's schema (files written before a schema
    change lack the new columns, or carry narrower types): they are unified the way a query
    engine would."""
    options = HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    batches = table(path, version, read_optimized, storage_options).read(options)
    if not batches:
        return None
    return pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")


def read_table(path: str, version: str) -> pa.Table:
    """A snapshot read as one table (batches of one schema)."""
    return pa.Table.from_batches(table(path, version).read(HudiReadOptions()))
