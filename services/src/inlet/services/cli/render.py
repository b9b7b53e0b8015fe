"""Plain-text rendering of rows as an aligned table (for the CLI and the demo)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from inlet.services.cli import dataio

MAX_CELL = 48


def _cell(value: Any) -> str:
    text = "null" if value is None else str(value)
    text = " ".join(text.split())
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Rows under a header, columns padded to their widest cell; numbers right-aligned."""
    cols = list(columns) if columns is not None else list(rows[0]) if rows else []
    if not cols:
        return "(no columns)"
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(cols)]
    numeric = [
        bool(rows) and all(isinstance(r.get(c), int | float) or r.get(c) is None for r in rows) for c in cols
    ]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    out = [line(cols), "  ".join("-" * w for w in widths)]
    out.extend(line(row) for row in cells)
    if not rows:
        out.append("(no rows)")
    return "\n".join(out)


def format_mapping(data: Mapping[str, Any], indent: str = "") -> str:
    """``key: value`` lines; nested mappings and lists are indented below their key."""
    lines = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            lines.append(f"{indent}{key}:")
            lines.extend(f"{indent}  {k} = {v}" for k, v in value.items())
        elif isinstance(value, list):
            lines.append(f"{indent}{key}:" + ("" if value else " []"))
            lines.extend(f"{indent}  - {v}" for v in value)
        else:
            lines.append(f"{indent}{key}: {'null' if value is None else value}")
    return "\n".join(lines)


def print_json(doc: Any) -> None:
    """One JSON line on stdout (values JSON cannot hold made safe first)."""
    sys.stdout.write(json.dumps(dataio.json_safe(doc)) + "\n")
