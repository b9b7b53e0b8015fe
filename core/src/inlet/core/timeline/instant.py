"""Instants: ``(requested time, action, state[, completion time])`` and their file names.

Table version 8 (timeline layout 2) names them ``<t>.<action>.requested``,
``<t>.<action>.inflight`` (a plain commit: ``<t>.inflight``) and ``<t>_<completion>.<action>``.
Table versions <= 6 (layout 1) keep ``<t>.<action>`` without a completion time.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
from dataclasses import dataclass

from inlet.core.errors import InvalidInputError

INSTANT_FORMAT = "%Y%m%d%H%M%S"
INSTANT_RE = re.compile(r"^\d{14}(\d{3})?$")  # 14 digits: Hudi before 0.10 (no millis)


class State(enum.StrEnum):
    REQUESTED = "REQUESTED"
    INFLIGHT = "INFLIGHT"
    COMPLETED = "COMPLETED"


class Action:
    COMMIT = "commit"
    DELTA_COMMIT = "deltacommit"
    REPLACE_COMMIT = "replacecommit"
    CLUSTERING = "clustering"
    COMPACTION = "compaction"
    LOG_COMPACTION = "logcompaction"
    ROLLBACK = "rollback"
    CLEAN = "clean"
    SAVEPOINT = "savepoint"
    RESTORE = "restore"
    INDEXING = "indexing"

    # actions whose completed instants add or replace data files
    WRITE_ACTIONS = frozenset({COMMIT, DELTA_COMMIT, REPLACE_COMMIT})
    # pending form -> action of the completed instant
    COMPLETES_AS = {COMPACTION: COMMIT, LOG_COMPACTION: DELTA_COMMIT, CLUSTERING: REPLACE_COMMIT}


def format_instant_time(moment: dt.datetime) -> str:
    """``yyyyMMddHHmmssSSS`` of an aware or naive datetime (naive = already in timeline zone)."""
    return moment.strftime(INSTANT_FORMAT) + f"{moment.microsecond // 1000:03d}"


def parse_instant_time(text: str) -> dt.datetime:
    """Parse an instant time (``yyyyMMddHHmmss[SSS]``) as a UTC datetime."""
    t = normalize_instant_time(text)
    base = dt.datetime.strptime(t[:14], INSTANT_FORMAT).replace(tzinfo=dt.UTC)
    return base + dt.timedelta(milliseconds=int(t[14:17]))


def normalize_instant_time(text: str) -> str:
    """Accept ``yyyyMMddHHmmss[SSS]`` or ISO-8601 (``2024-01-02T03:04:05.678``); return 17 digits."""
    t = text.strip()
    if t.isdigit() and len(t) in (14, 17):
        return t if len(t) == 17 else t + "000"
    try:
        moment = dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInputError(
            f"invalid instant time {text!r}: expected yyyyMMddHHmmssSSS or an ISO-8601 timestamp"
        ) from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
    return format_instant_time(moment)


@dataclass(frozen=True, order=True)
class Instant:
    time: str
    action: str
    state: State
    completion_time: str | None = None

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED

    def with_state(self, state: State, completion_time: str | None = None) -> Instant:
        action = self.action
        if state is State.COMPLETED:
            action = Action.COMPLETES_AS.get(action, action)
        return Instant(self.time, action, state, completion_time)

    def file_name(self, layout_version: int = 2) -> str:
        if self.state is State.REQUESTED:
            return f"{self.time}.{self.action}.requested"
        if self.state is State.INFLIGHT:
            if self.action == Action.COMMIT:
                return f"{self.time}.inflight"
            return f"{self.time}.{self.action}.inflight"
        if layout_version >= 2:
            return f"{self.time}_{self.completion_time}.{self.action}"
        return f"{self.time}.{self.action}"

    @staticmethod
    def parse_file_name(name: str, mtime_ms: int | None = None) -> Instant | None:
        """Instant named by a timeline file, or None for files that are not instants."""
        head, dot, rest = name.partition(".")
        if not dot or not rest:
            return None
        time, sep, completion = head.partition("_")
        if not INSTANT_RE.match(time) or (sep and not INSTANT_RE.match(completion)):
            return None
        parts = rest.split(".")
        if parts == ["inflight"]:
            return Instant(time, Action.COMMIT, State.INFLIGHT)
        if len(parts) == 2 and parts[1] in ("requested", "inflight"):
            return Instant(time, parts[0], State.REQUESTED if parts[1] == "requested" else State.INFLIGHT)
        if len(parts) != 1:
            return None
        if not completion and mtime_ms is not None:
            # layout 1 has no completion time in the name; the file's write time stands in for it
            moment = dt.datetime.fromtimestamp(mtime_ms / 1000, dt.UTC).replace(tzinfo=None)
            completion = max(time, format_instant_time(moment))
        return Instant(time, parts[0], State.COMPLETED, completion or None)
