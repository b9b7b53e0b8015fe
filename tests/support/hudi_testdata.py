"""Tables written by Apache Hudi (``<repo>/../shared/testdata/hudi-tables/*.zip``), unzipped on demand.

Each zip holds one table folder (plus, in some, macOS ``__MACOSX/`` debris, which is skipped).
Two zips extract to the same folder name, so every zip gets its own directory.
"""

from __future__ import annotations

import posixpath
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTDATA_DIR = REPO_ROOT.parent / "shared" / "testdata" / "hudi-tables"

COW_TABLES = (
    "sample_table_cow_v8_complexkeygen_hivestyle",
    "sample_table_cow_v8_nonpartitioned",
    "sample_table_cow_v8_simplekeygen_nonhivestyle",
    "sample_table_cow_v8_simplekeygen_hivestyle_no_metafields",
    "sample_table_cow_v8_empty",
    "sample_table_cow_v9_txns_simple_meta",
)
MOR_TABLES = (
    "quickstart_trips_table_mor_avro_v6_trips_8i3d",
    "sample_table_mor_parquet_v6_nonpartitioned_rollback",
    "sample_table_mor_parquet_v6_simplekeygen_nonhivestyle",
    "sample_table_mor_avro_v9_nonpartitioned_rollback",
    "sample_table_mor_avro_v9_txns_simple_meta",
    "sample_table_mor_avro_v9_txns_simple_overwrite",
)
V6_TABLES = tuple(name for name in MOR_TABLES if "_v6_" in name)


def available() -> bool:
    return TESTDATA_DIR.is_dir() and any(TESTDATA_DIR.glob("*.zip"))


def zip_path(name: str) -> Path:
    return TESTDATA_DIR / f"{name}.zip"


def sql_text(name: str) -> str:
    return (TESTDATA_DIR / f"{name}.sql").read_text()


def extract(name: str, dest: Path) -> Path:
    """Unzip table ``name`` into the (empty or new) directory ``dest``; returns the table's base path."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    with zipfile.ZipFile(zip_path(name)) as zf:
        for info in zf.infolist():
            member = info.filename
            if member.startswith("__MACOSX/") or posixpath.basename(member.rstrip("/")) == ".DS_Store":
                continue
            target = (root / member).resolve()
            if not target.is_relative_to(root):
                raise ValueError(f"{zip_path(name)}: entry {member!r} escapes the extraction directory")
            zf.extract(info, root)
    tables = sorted(p.parent.parent for p in root.glob("*/.hoodie/hoodie.properties"))
    if len(tables) != 1:
        raise ValueError(f"{zip_path(name)}: expected one table folder, found {tables}")
    return tables[0]


class TableCache:
    """Extracts each zip once per test session into its own directory (read-only use only)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._paths: dict[str, Path] = {}

    def path(self, name: str) -> Path:
        if name not in self._paths:
            self._paths[name] = extract(name, self.base / name)
        return self._paths[name]
