"""Indexes: where does a record key live?

- the simple bucket index — Apache Hudi's ``(javaListHashCode(hashKeyValues) & 0x7fffffff) %
  numBuckets``, file ids prefixed by the zero-padded bucket number, so Inlet and Apache Hudi
  route every key to the same file group.
- the simple index (a join of incoming keys with the stored keys of the latest file slices of
  the touched partitions) lives with the writers, where the stored keys are read.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

import pyarrow as pa

BUCKET_ID_WIDTH = 8
_INT_MASK = 0xFFFFFFFF


NULL_PLACEHOLDER = "__null__"  # complex record keys encode null and empty values with these
EMPTY_PLACEHOLDER = "__empty__"


def java_string_hash(text: str) -> int:
    """``java.lang.String#hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")  # a lone surrogate is one code unit in Java too
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _INT_MASK
    return h - (1 << 32) if h & 0x80000000 else h


def java_list_hash(values: Iterable[str | None]) -> int:
    """``java.util.List#hashCode`` of a list of strings, as a signed 32-bit int."""
    h = 1
    for v in values:
        h = (31 * h + (java_string_hash(v) if v is not None else 0)) & _INT_MASK
    return h - (1 << 32) if h & 0x80000000 else h


def _last_index_of(text: str, char: str, from_index: int) -> int:
    """``String#lastIndexOf(char, fromIndex)``: -1 for a negative ``from_index``."""
    return text.rfind(char, 0, from_index + 1) if from_index >= 0 else -1


def hash_key_values(record_key: str, hash_fields: Sequence[str]) -> list[str | None]:
    """The values Apache Hudi 1.x hashes for a record key (``KeyGenUtils#extractRecordKeysByFields``).

    A key without both ``,`` and ``:`` hashes as itself. A complex key ``f1:v1,f2:v2`` yields the
    values of the fields listed in ``hash_fields`` (all of them if it is empty) in the order the
    key holds them; ``__null__`` is null and ``__empty__`` the empty string. A value runs to the
    last ``,`` before the next ``:``, so values may hold ``:`` (timestamps) and ``,``.
    """
    if "," not in record_key or ":" not in record_key:
        return [record_key]
    wanted = set(hash_fields)
    take_all = not wanted or wanted == {""}
    values: list[str | None] = []
    pos, end = 0, len(record_key)
    while pos < end:
        sep = record_key.find(":", pos)
        if sep < 0:
            break
        field = record_key[pos:sep]
        nxt = record_key.find(":", sep + 1)
        comma = _last_index_of(record_key, ",", nxt)
        while comma < sep and nxt > 0:  # skip the ':' inside this value
            nxt = record_key.find(":", nxt + 1)
            comma = _last_index_of(record_key, ",", nxt)
        if nxt < 0 or comma <= 0:
            value, pos = record_key[sep + 1 :], end  # the last pair
        else:
            value, pos = record_key[sep + 1 : comma], comma + 1
        if take_all or field in wanted:
            values.append(None if value == NULL_PLACEHOLDER else "" if value == EMPTY_PLACEHOLDER else value)
    return values or [record_key]


def bucket_id(record_key: str, hash_fields: Sequence[str], num_buckets: int) -> int:
    """``BucketIdentifier#getBucketId``: ``(hashKeys.hashCode() & Integer.MAX_VALUE) % numBuckets``."""
    return (java_list_hash(hash_key_values(record_key, hash_fields)) & 0x7FFFFFFF) % num_buckets


def bucket_ids(
    record_keys: pa.ChunkedArray | pa.Array, hash_fields: Sequence[str], num_buckets: int
) -> pa.Array:
    fields = list(hash_fields)
    return pa.array([bucket_id(k, fields, num_buckets) for k in record_keys.to_pylist()], pa.int32())


def bucket_file_id_prefix(bucket: int) -> str:
    """A new file id prefix for a bucket: a UUID whose first 8 characters are the bucket number."""
    return f"{bucket:0{BUCKET_ID_WIDTH}d}" + str(uuid.uuid4())[BUCKET_ID_WIDTH:]


def nbcc_bucket_file_id(bucket: int) -> str:
    """The fixed file id Apache Hudi uses for a bucket under non-blocking concurrency control."""
    return f"{bucket:0{BUCKET_ID_WIDTH}d}-0000-0000-0000-000000000000-0"


def bucket_of_file_id(file_id: str) -> int | None:
    head = file_id[:BUCKET_ID_WIDTH]
    return int(head) if head.isdigit() else None
