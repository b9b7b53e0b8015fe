"""Debezium's table filter for ``--tables`` globs leaves the partitions named out (issue #32): each
glob's regex is preceded by a negative lookahead, matched as Debezium matches it (the whole
``schema.table``; Java's regex has the same lookahead and escapes)."""

from __future__ import annotations

import re

from inlet.services.source_tables import include_regexes


def _matches(include_list: str, name: str) -> bool:
    return any(re.fullmatch(r, name) for r in include_list.split(","))


def test_the_include_list_matches_the_globs_but_not_the_partitions() -> None:
    plain = include_regexes(["public.*", "shop.orders"])
    assert plain == r"public\..*,shop\.orders"
    excluded = include_regexes(["public.*", "shop.orders"], [("public", "events_2026"), ("public", "a.b")])
    for name in ("public.events", "public.items", "public.events_2026_x", "public.aXb", "shop.orders"):
        assert _matches(excluded, name), name
    for name in ("public.events_2026", "public.a.b", "shop.items"):
        assert not _matches(excluded, name), name
    assert "," not in excluded.replace(",(?!", "")  # one regex per glob: Debezium splits on commas
