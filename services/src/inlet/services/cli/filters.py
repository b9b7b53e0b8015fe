"""``--filter 'col op value'`` expressions -> ``(column, op, value)`` tuples for :meth:`HudiTable.read`.

Operators: ``==`` (or ``=``), ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in`` and ``not in`` (values
separated by commas). Values stay strings (optionally quoted); the core converts them to the
column's type.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from inlet.services.cli.errors import UsageError

OPERATORS = ("==", "!=", "<", "<=", ">", ">=", "in", "not in")
_FILTER_RE = re.compile(
    r"^\s*(?P<col>[^\s=!<>].*?)\s*(?P<op>==|!=|<>|<=|>=|=|<|>|\s(?:not\s+)?in\s)\s*(?P<value>.*?)\s*$",
    re.IGNORECASE | re.DOTALL,
)

Filter = tuple[str, str, str | list[str]]


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def parse_filter(text: str) -> Filter:
    """``"fare >= 10"`` -> ``("fare", ">=", "10")``; ``"city in sf,nyc"`` -> ``("city", "in", ["sf", "nyc"])``."""
    m = _FILTER_RE.match(text)
    if m is None:
        raise UsageError(
            f"invalid filter {text!r}: expected 'column op value' with op one of {', '.join(OPERATORS)}"
        )
    column = _unquote(m.group("col"))
    op = " ".join(m.group("op").lower().split())
    raw = m.group("value")
    if not raw:
        raise UsageError(f"invalid filter {text!r}: no value after {op!r}")
    if op in ("in", "not in"):
        values = [_unquote(v) for v in raw.split(",") if v.strip()]
        if not values:
            raise UsageError(f"invalid filter {text!r}: no values after {op!r}")
        return (column, op, values)
    return (column, op, _unquote(raw))


def parse_filters(texts: Sequence[str] | None) -> list[Filter]:
    return [parse_filter(t) for t in texts or ()]
