"""What a read asks for, once for every reader (the Python API, the CLI, the Spark data source):
the query type (Hudi's ``hoodie.datasource.query.type``), the instant it reads as of, or the
completion-time range of an incremental query, columns, filters and meta columns."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from inlet.core.errors import InvalidInputError

Filter = tuple[str, str, Any]


E = TypeVar("E", bound=enum.StrEnum)


def _parse(cls: type[E], value: E | str, what: str) -> E:
    """``value`` as a member of ``cls``, spelled in any case, with ``-`` or ``_``."""
    if isinstance(value, cls):
        return value
    try:
        return cls(str(value).strip().lower().replace("-", "_"))
    except ValueError:
        raise InvalidInputError(
            f"unknown {what} {value!r} (use one of {', '.join(m.value for m in cls)})"
        ) from None


class QueryType(enum.StrEnum):
    """Hudi's query types: ``snapshot`` merges Merge-on-Read log files into their base files,
    ``read_optimized`` reads base files only, ``incremental`` reads what commits completed in a
    range of completion times wrote."""

    SNAPSHOT = "snapshot"
    READ_OPTIMIZED = "read_optimized"
    INCREMENTAL = "incremental"

    @classmethod
    def parse(cls, value: QueryType | str) -> QueryType:
        return _parse(cls, value, "query type")


class ChangeFormat(enum.StrEnum):
    """What an incremental query returns: Hudi's ``hoodie.datasource.query.incremental.format``
    values ``latest_state`` and ``cdc`` (:mod:`inlet.core.read.cdc`), and Inlet's ``min_delta`` and
    ``append_only`` (:mod:`inlet.core.read.net_changes`)."""

    LATEST_STATE = "latest_state"
    CDC = "cdc"
    MIN_DELTA = "min_delta"
    APPEND_ONLY = "append_only"

    @classmethod
    def parse(cls, value: ChangeFormat | str) -> ChangeFormat:
        return _parse(cls, value, "change format")


@dataclass(frozen=True)
class InstantRange:
    """Commits whose completion time is in ``(begin, end]`` (``end`` None: up to the latest)."""

    begin: str
    end: str | None = None


@dataclass(frozen=True)
class ReadOptions:
    """One read's request. ``as_of`` (snapshot and read-optimized) and ``range`` (incremental)
    exclude each other."""

    query_type: QueryType = QueryType.SNAPSHOT
    as_of: str | None = None
    range: InstantRange | None = None
    columns: tuple[str, ...] | None = None
    filters: tuple[Filter, ...] = ()
    meta_columns: bool = True
    change_format: ChangeFormat = ChangeFormat.LATEST_STATE  # incremental queries only

    @classmethod
    def of(
        cls,
        query_type: QueryType | str = QueryType.SNAPSHOT,
        as_of: str | None = None,
        columns: Sequence[str] | None = None,
        filters: Sequence[Filter] | None = None,
        meta_columns: bool = True,
        begin: str | None = None,
        end: str | None = None,
        change_format: ChangeFormat | str = ChangeFormat.LATEST_STATE,
    ) -> ReadOptions:
        qt = QueryType.parse(query_type)
        fmt = ChangeFormat.parse(change_format)
        if qt is QueryType.INCREMENTAL:
            if not begin:
                raise InvalidInputError("an incremental query needs a begin instant")
            if as_of:
                raise InvalidInputError("an incremental query reads a range of commits, not as of an instant")
            if fmt is not ChangeFormat.LATEST_STATE and filters:
                raise InvalidInputError(f"{fmt.value} change queries take no filters")
        elif begin or end:
            raise InvalidInputError(f"begin/end instants apply to incremental queries, not {qt.value}")
        elif fmt is not ChangeFormat.LATEST_STATE:
            raise InvalidInputError(
                f"the {fmt.value} change format applies to incremental queries, not {qt.value}"
            )
        return cls(
            qt,
            as_of,
            InstantRange(begin, end) if begin else None,
            tuple(columns) if columns is not None else None,
            tuple(filters or ()),
            meta_columns,
            fmt,
        )
