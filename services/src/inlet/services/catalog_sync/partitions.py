"""Hudi's partition value extractors and Hive's partition names.

The extractors turn a Hudi relative partition path into the metastore partition's values, as the classes of
the same names in ``org.apache.hudi.hive`` do:

* ``MultiPartKeysValueExtractor``: one value per ``/``-separated part, ``key=value`` parts give ``value``
  (``""`` -> no values);
* ``SinglePartPartitionValueExtractor``: the whole path as one value, ``/`` replaced by ``-``;
* ``HiveStylePartitionValueExtractor``: ``key=value`` -> ``value`` (one part only);
* ``SlashEncodedDayPartitionValueExtractor``: ``yyyy/mm/dd`` (parts may be ``key=value``) -> ``yyyy-MM-dd``;
* ``SlashEncodedHourPartitionValueExtractor``: ``yyyy/mm/dd/HH`` -> ``yyyy-MM-dd-HH``;
* ``NonPartitionedExtractor``: no values.

Which one applies by default follows ``HoodieSyncConfig``'s inference: no partition fields -> non-partitioned;
one field -> hive-style when the table writes hive-style paths, else single-part; several -> multi-part.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable

from inlet.services.catalog_sync.errors import CatalogSyncError

Extractor = Callable[[str], list[str]]

_PREFIXES = ("org.apache.hudi.hive.", "org.apache.hudi.sync.common.model.", "org.apache.hudi.hive.sync.")


def multi_part_keys(path: str) -> list[str]:
    if not path:
        return []
    out = []
    for part in path.split("/"):
        if "=" in part:
            pieces = part.split("=")
            if len(pieces) != 2:
                raise CatalogSyncError(f"Partition Field ({part}) not in expected format")
            out.append(pieces[1])
        else:
            out.append(part)
    return out


def single_part(path: str) -> list[str]:
    return [path.replace("/", "-")]


def hive_style(path: str) -> list[str]:
    pieces = path.split("=")
    if len(pieces) != 2:
        raise CatalogSyncError(f"Partition path {path} is not in the form partition_key=partition_value.")
    return [pieces[1]]


def _date_parts(path: str, n: int, form: str) -> list[int]:
    parts = path.split("/")
    if len(parts) != n:
        raise CatalogSyncError(f"Partition path {path} is not in the form {form}")
    try:
        return [int(p.split("=")[1] if "=" in p else p) for p in parts]
    except ValueError as e:
        raise CatalogSyncError(f"Partition path {path} is not in the form {form}") from e


def slash_encoded_day(path: str) -> list[str]:
    y, m, d = _date_parts(path, 3, "yyyy/mm/dd")
    return [f"{y:04d}-{m:02d}-{d:02d}"]


def slash_encoded_hour(path: str) -> list[str]:
    y, m, d, h = _date_parts(path, 4, "yyyy/mm/dd/HH")
    return [f"{y:04d}-{m:02d}-{d:02d}-{h:02d}"]


def non_partitioned(path: str) -> list[str]:
    return []


EXTRACTORS: dict[str, Extractor] = {
    "MultiPartKeysValueExtractor": multi_part_keys,
    "SinglePartPartitionValueExtractor": single_part,
    "HiveStylePartitionValueExtractor": hive_style,
    "SlashEncodedDayPartitionValueExtractor": slash_encoded_day,
    "SlashEncodedHourPartitionValueExtractor": slash_encoded_hour,
    "NonPartitionedExtractor": non_partitioned,
}


def extractor_by_name(name: str) -> Extractor:
    """The extractor for a Hudi class name (``org.apache.hudi.hive.MultiPartKeysValueExtractor``) or short name."""
    short = name
    for prefix in _PREFIXES:
        if short.startswith(prefix):
            short = short[len(prefix) :]
            break
    short = short.rsplit(".", 1)[-1]
    if short not in EXTRACTORS:
        raise CatalogSyncError(
            f"unknown partition value extractor {name!r} (known: {', '.join(sorted(EXTRACTORS))})"
        )
    return EXTRACTORS[short]


def default_extractor_class(partition_fields: list[str], hive_style_paths: bool) -> str:
    """``HoodieSyncConfig.META_SYNC_PARTITION_EXTRACTOR_CLASS``'s inference."""
    if not partition_fields:
        return "org.apache.hudi.hive.NonPartitionedExtractor"
    if len(partition_fields) == 1:
        if hive_style_paths:
            return "org.apache.hudi.hive.HiveStylePartitionValueExtractor"
        return "org.apache.hudi.hive.SinglePartPartitionValueExtractor"
    return "org.apache.hudi.hive.MultiPartKeysValueExtractor"


# Hive's FileUtils.escapePathName: the characters a partition name escapes as %XX
_ESCAPED = {chr(c) for c in range(1, 0x20)} | set("\"#%'*/:=?\\\x7f{[]^")


def escape_path_name(value: str) -> str:
    if value == "":
        return "__HIVE_DEFAULT_PARTITION__"
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def partition_name(keys: list[str], values: list[str]) -> str:
    """Hive's ``Warehouse.makePartName``: ``k1=v1/k2=v2`` with keys lower-cased and both escaped."""
    if len(keys) != len(values):
        raise CatalogSyncError(
            f"Partition key parts {keys} does not match with partition values {values}. Check partition strategy."
        )
    return "/".join(
        f"{escape_path_name(k.lower())}={escape_path_name(v)}" for k, v in zip(keys, values, strict=True)
    )


def unescape(value: str) -> str:
    """``PartitionPathEncodeUtils.unescapePathName`` (URL-encoded partition paths)."""
    return urllib.parse.unquote(value)
