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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    """:func:`bucket_id` of every record key, as an int32 array.

    Keys that hash as themselves (no ``,`` and ``:`` both) and are ASCII — one UTF-16 code unit per
    byte — are hashed with numpy on their UTF-8 bytes (:func:`ascii_string_hashes`); any other key
    goes through :func:`bucket_id`.
    """
    keys = record_keys.combine_chunks() if isinstance(record_keys, pa.ChunkedArray) else record_keys
    keys = keys.cast(pa.string())
    fast = pc.and_(
        pc.string_is_ascii(keys),
        pc.invert(pc.and_(pc.match_substring(keys, ","), pc.match_substring(keys, ":"))),
    )
    fast = np.asarray(pc.fill_null(fast, False).to_numpy(zero_copy_only=False), dtype=bool)
    out = np.empty(len(keys), dtype=np.int64)
    if fast.any():
        hashes = ascii_string_hashes(keys.filter(pa.array(fast)))
        list_hash = (31 + hashes) & _INT_MASK  # List#hashCode of the one value
        out[fast] = (list_hash & 0x7FFFFFFF) % num_buckets
    slow = np.flatnonzero(~fast)
    if len(slow):
        fields = list(hash_fields)
        others = keys.take(pa.array(slow)).to_pylist()
        out[slow] = [bucket_id(k, fields, num_buckets) for k in others]
    return pa.array(out.astype(np.int32), pa.int32())


def ascii_string_hashes(strings: pa.Array) -> np.ndarray:
    """``String#hashCode`` of ASCII strings (no nulls), unsigned 32-bit, as int64.

    ``h = sum(c[i] * 31**(len-1-i)) mod 2**32``: strings of one length form a byte matrix whose
    product with the powers of 31 gives their hashes (uint64 arithmetic wraps modulo 2**64, a
    multiple of 2**32).
    """
    n = len(strings)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32, count=n + 1, offset=strings.offset * 4)
    offsets = offsets.astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    if hi == lo:
        return np.zeros(n, dtype=np.int64)
    data = np.frombuffer(strings.buffers()[2], dtype=np.uint8, count=hi - lo, offset=lo)
    starts, lengths = offsets[:-1] - lo, np.diff(offsets)
    powers = np.full(int(lengths.max()), 31, dtype=np.uint64)
    powers[0] = 1
    powers = np.cumprod(powers) & np.uint64(_INT_MASK)  # 31**k mod 2**32
    hashes = np.zeros(n, dtype=np.uint64)
    order = np.argsort(lengths, kind="stable")
    by_length = lengths[order]
    bounds = np.flatnonzero(np.r_[True, by_length[1:] != by_length[:-1], True])
    for first, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        size = int(by_length[first])
        if size == 0:
            continue
        rows = order[first:end]
        chars = data[starts[rows][:, None] + np.arange(size)].astype(np.uint64)
        hashes[rows] = (chars @ powers[size - 1 :: -1]) & np.uint64(_INT_MASK)
    return hashes.astype(np.int64)


def bucket_file_id_prefix(bucket: int) -> str:
    """A new file id prefix for a bucket: a UUID whose first 8 characters are the bucket number."""
    return f"{bucket:0{BUCKET_ID_WIDTH}d}" + str(uuid.uuid4())[BUCKET_ID_WIDTH:]


def nbcc_bucket_file_id(bucket: int) -> str:
    """The fixed file id Apache Hudi uses for a bucket under non-blocking concurrency control."""
    return f"{bucket:0{BUCKET_ID_WIDTH}d}-0000-0000-0000-000000000000-0"


def bucket_of_file_id(file_id: str) -> int | None:
    head = file_id[:BUCKET_ID_WIDTH]
    return int(head) if head.isdigit() else None
