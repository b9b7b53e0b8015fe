"""Apache Hudi's metadata table (``.hoodie/metadata``), which Inlet turns off when it commits.

Apache Hudi writers keep, by default (``hoodie.metadata.enable=true``), a second Hudi table under
``.hoodie/metadata``: its ``files`` partition lists every data file, and Hudi 1.x adds
``column_stats`` and ``partition_stats`` (per-file and per-partition column ranges, used to skip
files and partitions) and may add ``record_index``, ``bloom_filters`` and secondary indexes. The
table config names the partitions that are ready (``hoodie.table.metadata.partitions``) and those
being built (``hoodie.table.metadata.partitions.inflight``); readers that find ``files`` among the
ready ones (Apache Hudi, hudi-rs) list the table's files through the metadata table, not the file
system.

Inlet does not write the metadata table (HFile blocks, and the column statistics of every file
it writes), so after an Inlet commit those readers would not see Inlet's files, and Hudi's data
skipping would use statistics that omit them. Every Inlet commit therefore turns the metadata
table off, as an Apache Hudi writer with ``hoodie.metadata.enable=false`` does
(``HoodieTable.maybeDeleteMetadataTable``: both keys are emptied, ``.hoodie/metadata`` is
deleted): readers list the file system from then on, and the next Apache Hudi writer that
enables the metadata table builds it again from the file system (bootstrap), after which the
next Inlet commit turns it off again.

Order, so that no reader ever uses a metadata table that misses a completed instant, and a
failed commit leaves the table as it was:

1. under the table lock, :func:`turned_off` writes the table config without the partitions (one
   atomic write), then the caller writes the completed instant; if that fails, the original
   ``hoodie.properties`` is written back, byte for byte;
2. after the completion, ``.hoodie/metadata`` is deleted: a table config that names no partitions
   makes every reader ignore it, so a process that dies before this step leaves only a directory
   that Apache Hudi's next bootstrap replaces, or Inlet's next clean, restore or archive deletes
   (:func:`delete_leftover`; a commit does not look for it, to cost one request on an object store).
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from inlet.core.errors import InletError
from inlet.core.storage import Storage
from inlet.core.table import properties as props_io
from inlet.core.timeline.instant import Action

log = logging.getLogger(__name__)

PARTITIONS_KEY = "hoodie.table.metadata.partitions"
INFLIGHT_PARTITIONS_KEY = "hoodie.table.metadata.partitions.inflight"
KEYS = (PARTITIONS_KEY, INFLIGHT_PARTITIONS_KEY)
#: the metadata table's base path, relative to the data table's
TABLE_DIR = ".hoodie/metadata"


def partitions(props: Mapping[str, str]) -> list[str]:
    """The metadata table's partitions the table config names, ready or being built."""
    out: list[str] = []
    for key in KEYS:
        out.extend(p.strip() for p in props.get(key, "").split(",") if p.strip())
    return out


def is_on(props: Mapping[str, str]) -> bool:
    """Whether readers may list files through a metadata table (any partition named)."""
    return bool(partitions(props))


@contextmanager
def turned_off(storage: Storage) -> Iterator[bool]:
    """Inside the block the table config names no metadata table partitions; the block writes the
    completed instant. Yields whether a metadata table was turned off. If the block raises, the
    table config is written back as it was. Call under the table lock."""
    try:  # one GET per commit on an object store: no existence check first
        original = storage.read_bytes(props_io.PROPERTIES_PATH)
    except InletError:  # no table config yet (a table being created)
        yield False
        return
    props = props_io.loads(original.decode("utf-8"))
    if not is_on(props):
        yield False
        return
    named = ",".join(partitions(props))
    crc = props_io.CHECKSUM_FILE_PATH
    original_crc = storage.read_bytes(crc) if storage.is_local and storage.exists(crc) else None
    props_io.write_properties(storage, {**props, **dict.fromkeys(KEYS, "")})
    try:
        yield True
    except BaseException:
        storage.write_atomic(props_io.PROPERTIES_PATH, original)
        if original_crc is not None:
            storage.write_atomic(crc, original_crc)
        raise
    log.warning(
        "turned the metadata table of %s off (%s): Inlet does not maintain it; readers list the file "
        "system, and an Apache Hudi writer with the metadata table enabled builds it again",
        storage.base_uri,
        named,
    )


def delete_leftover(storage: Storage) -> bool:
    """Delete ``.hoodie/metadata`` if the table config names none of its partitions (after
    :func:`turned_off`, or left by a writer that died before this step). True if deleted."""
    if not storage.exists(TABLE_DIR):
        return False
    if is_on(props_io.read_properties(storage)):
        return False
    storage.delete_dir(TABLE_DIR)
    return True


def write_completed(storage: Storage, rel: str, content: bytes, action: str) -> None:
    """Write a completed instant's file ``rel`` (under the table lock, or the coordinator's
    serialisation): every action but a rollback turns the metadata table off first. A rollback
    deletes the files of an instant that never completed, which no listing has; the rollback of an
    instant the metadata table recorded turns it off itself (:func:`knows_instant`), so a failed
    write and its rollback leave the metadata table as it was."""
    if action == Action.ROLLBACK:
        storage.write_atomic(rel, content)
        return
    with turned_off(storage) as was_on:
        storage.write_atomic(rel, content)
    if was_on:
        storage.delete_dir(TABLE_DIR)


def turn_off(storage: Storage) -> bool:
    """Turn the metadata table off now, for good: before an action deletes data files or archives
    instants (clean, restore, archive, the rollback of an instant the metadata table recorded),
    which a metadata table would go on listing. Call under the table lock. True if it was on."""
    with turned_off(storage) as was_on:
        pass
    delete_leftover(storage)
    return was_on


def knows_instant(storage: Storage, instant_time: str) -> bool:
    """Whether the metadata table's timeline has an instant at ``instant_time`` (Apache Hudi writes
    a data instant's files into the metadata table before completing the data instant, so a
    pending data instant may be recorded there)."""
    names = storage.list_names(posixpath.join(TABLE_DIR, ".hoodie", "timeline"))
    return any(n.startswith((instant_time + ".", instant_time + "_")) for n in names)
