"""``.hoodie/hoodie.properties``: Java properties codec, checksum, and table creation defaults."""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Mapping

from inlet.core.config import TableConfig
from inlet.core.errors import CorruptFileError, InvalidConfigError, TableNotFoundError
from inlet.core.storage import Storage

PROPERTIES_PATH = ".hoodie/hoodie.properties"
#: the checksum file Hadoop's local file system (Apache Hudi on local disk) writes beside it
CHECKSUM_FILE_PATH = ".hoodie/.hoodie.properties.crc"
CURRENT_TABLE_VERSION = 8
SUPPORTED_READ_VERSIONS = (5, 6, 8, 9)


def table_checksum(props: Mapping[str, str]) -> int:
    """CRC32 of ``<database>.<table name>`` as Apache Hudi's ``HoodieTableConfig`` computes it."""
    name = props.get(TableConfig.NAME.key)
    if not name:
        raise InvalidConfigError(f"{TableConfig.NAME.key} is required")
    database = props.get(TableConfig.DATABASE_NAME.key, "")
    return zlib.crc32(f"{database}.{name}".encode())


def _escape(text: str, is_key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "=:#!":
            out.append("\\" + ch)
        elif ch == " " and (is_key or i == 0):
            out.append("\\ ")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else ch)
        else:
            out.append(ch)
    return "".join(out)


def dumps(props: Mapping[str, str], comment: str | None = None) -> str:
    """Serialise like ``java.util.Properties.store`` (comment line, date line, escaped pairs)."""
    now = dt.datetime.now(dt.UTC)
    lines = []
    if comment:
        lines.append("#" + comment)
    lines.append("#" + now.strftime("%a %b %d %H:%M:%S UTC %Y"))
    for k in sorted(props):
        lines.append(f"{_escape(k, True)}={_escape(str(props[k]), False)}")
    return "\n".join(lines) + "\n"


def _unescape(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 5 < len(text) + 1:
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append({"n": "\n", "r": "\r", "t": "\t", "f": "\f"}.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def loads(text: str) -> dict[str, str]:
    """Parse Java properties text (comments, ``=``/``:`` separators, escapes, continuations)."""
    props: dict[str, str] = {}
    logical: list[str] = []
    for raw in text.splitlines():
        line = raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        # a line ending in an odd number of backslashes continues on the next line
        stripped = line
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1:
            logical.append(stripped[:-1])
            continue
        logical.append(stripped)
        full = "".join(logical)
        logical = []
        key_chars = []
        i = 0
        while i < len(full):
            ch = full[i]
            if ch == "\\" and i + 1 < len(full):
                key_chars.append(full[i : i + 2])
                i += 2
                continue
            if ch in "=: \t":
                break
            key_chars.append(ch)
            i += 1
        rest = full[i:].lstrip(" \t")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t")
        props[_unescape("".join(key_chars))] = _unescape(rest)
    return props


def read_properties(storage: Storage) -> dict[str, str]:
    if not storage.exists(PROPERTIES_PATH):
        # Apache Hudi keeps a backup while it updates the file
        backup = PROPERTIES_PATH + ".backup"
        if storage.exists(backup):
            return loads(storage.read_bytes(backup).decode("utf-8"))
        raise TableNotFoundError(f"no Hudi table at {storage.base_uri} (missing {PROPERTIES_PATH})")
    try:
        return loads(storage.read_bytes(PROPERTIES_PATH).decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CorruptFileError(f"{PROPERTIES_PATH} is not valid UTF-8 text") from e


def write_properties(storage: Storage, props: dict[str, str]) -> None:
    props = dict(props)
    props[TableConfig.CHECKSUM.key] = str(table_checksum(props))
    comment = "Updated at " + dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
    storage.write_atomic(PROPERTIES_PATH, dumps(props, comment).encode("utf-8"))
    drop_checksum_file(storage)


def drop_checksum_file(storage: Storage) -> None:
    """Delete Hadoop's checksum of the old ``hoodie.properties`` (after rewriting it): on local disk
    Apache Hudi reads through Hadoop's checksummed file system, which fails on a checksum of other
    content, and reads a file without one unchecked."""
    if storage.is_local:
        storage.delete(CHECKSUM_FILE_PATH)
