"""Checks of what clients send: table ids, instant times, actions, paths confined to the lake roots."""

from __future__ import annotations

import datetime as dt
import os
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from inlet.core.timeline.instant import Action
from inlet.services.coordinator.errors import InvalidArgument, PermissionDenied

TABLE_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
INSTANT_TIME_RE = re.compile(r"^\d{17}$")
LOCK_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{0,64}$")
MAX_ID_LENGTH = 200

# Apache Hudi's timeline actions (HoodieTimeline): pending and completed forms
ACTIONS = frozenset(
    {
        Action.COMMIT,
        Action.DELTA_COMMIT,
        Action.REPLACE_COMMIT,
        Action.CLUSTERING,
        Action.COMPACTION,
        Action.LOG_COMPACTION,
        Action.ROLLBACK,
        Action.CLEAN,
        Action.SAVEPOINT,
        Action.RESTORE,
        Action.INDEXING,
    }
)
# actions whose completion carries HoodieCommitMetadata (and is conflict-checked)
METADATA_ACTIONS = frozenset(
    {
        Action.COMMIT,
        Action.DELTA_COMMIT,
        Action.REPLACE_COMMIT,
        Action.CLUSTERING,
        Action.COMPACTION,
        Action.LOG_COMPACTION,
    }
)


def table_id(value: str) -> str:
    if not TABLE_ID_RE.match(value):
        shown = value if len(value) <= 60 else value[:60] + "..."
        raise InvalidArgument(
            f"invalid table id {shown!r}: use 1 to 200 letters, digits, '_', '.' or '-' (e.g. sales.orders)"
        )
    return value


def lock_name(value: str) -> str:
    if not LOCK_NAME_RE.match(value):
        raise InvalidArgument(
            f"invalid lock name {value[:70]!r}: use up to 64 letters, digits, '_', '.' or '-' (\"\" is the write lock)"
        )
    return value


def instant_time(value: str, what: str = "instant time") -> str:
    if not INSTANT_TIME_RE.match(value):
        raise InvalidArgument(f"invalid {what} {value[:40]!r}: expected 17 digits, yyyyMMddHHmmssSSS")
    try:
        dt.datetime.strptime(value[:14], "%Y%m%d%H%M%S")
    except ValueError:
        raise InvalidArgument(f"invalid {what} {value!r}: not a calendar date and time") from None
    return value


def action(value: str) -> str:
    if value not in ACTIONS:
        raise InvalidArgument(f"invalid action {value[:40]!r}: expected one of {', '.join(sorted(ACTIONS))}")
    return value


def bounded(value: str, what: str, required: bool = False) -> str:
    if required and not value:
        raise InvalidArgument(f"{what} is required")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidArgument(f"{what} is longer than {MAX_ID_LENGTH} characters")
    if any(ord(c) < 32 for c in value):
        raise InvalidArgument(f"{what} contains control characters")
    return value


def non_negative(value: int, what: str, maximum: int | None = None) -> int:
    if value < 0:
        raise InvalidArgument(f"{what} must not be negative, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidArgument(f"{what} must be at most {maximum}, got {value}")
    return value


def relative_path(value: str, what: str) -> str:
    """A path inside the table (write stat paths, partition paths): relative, no ``..``, no scheme."""
    if not value:
        return value
    if "\x00" in value or "\\" in value:
        raise InvalidArgument(f"invalid {what} {value[:80]!r}: NUL or backslash")
    if value.startswith("/") or "://" in value:
        raise InvalidArgument(f"invalid {what} {value[:80]!r}: must be relative to the table's base path")
    if ".." in value.split("/"):
        raise InvalidArgument(f"invalid {what} {value[:80]!r}: '..' is not allowed")
    return value


@dataclass(frozen=True)
class LakeRoot:
    """A configured lake root: a resolved local directory, or a URI prefix of another scheme."""

    scheme: str  # "" for local paths (and file:// URIs)
    netloc: str
    path: str

    @classmethod
    def parse(cls, text: str) -> LakeRoot:
        scheme, netloc, path = _split(text)
        if scheme:
            if ".." in path.split("/"):
                raise ValueError(f"lake root {text!r} contains '..'")
            return cls(scheme, netloc, posixpath.normpath(path or "/"))
        if not os.path.isabs(path):
            path = os.path.abspath(path)
        return cls("", "", os.path.realpath(path))

    def __str__(self) -> str:
        return f"{self.scheme}://{self.netloc}{self.path}" if self.scheme else self.path


def _split(text: str) -> tuple[str, str, str]:
    """(scheme, netloc, path); local paths and ``file://`` URIs give scheme ''."""
    if "://" not in text:
        return "", "", text
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InvalidArgument(f"invalid base path {text!r}: file URIs name no host")
        return "", "", parts.path
    if not scheme:
        raise InvalidArgument(f"invalid base path {text!r}")
    return scheme, parts.netloc, parts.path


def confine(base_path: str, roots: Sequence[LakeRoot]) -> str:
    """The canonical form of ``base_path`` if it lies under one of ``roots``.

    Local paths are resolved (``..`` and symbolic links) before the comparison; URIs of other
    schemes must match a root's scheme and host and may not contain ``..``. A malformed path is
    INVALID_ARGUMENT, a path outside every root PERMISSION_DENIED.
    """
    if not base_path or "\x00" in base_path or len(base_path) > 4096:
        raise InvalidArgument("invalid base path: empty, too long or contains NUL")
    try:
        scheme, netloc, path = _split(base_path)
    except ValueError:
        raise InvalidArgument(f"invalid base path {base_path!r}") from None
    allowed = ", ".join(str(r) for r in roots) or "(none configured)"
    if not scheme:
        if not os.path.isabs(path):
            raise InvalidArgument(f"invalid base path {base_path!r}: must be absolute")
        resolved = os.path.realpath(path)
        for root in roots:
            if not root.scheme and _under(resolved, root.path, os.sep):
                if resolved == root.path:
                    raise PermissionDenied(
                        f"base path {base_path!r} is a lake root itself, not a table under it"
                    )
                return resolved
        raise PermissionDenied(
            f"base path {base_path!r} (resolved {resolved}) is outside the lake roots: {allowed}"
        )
    if ".." in path.split("/"):
        raise PermissionDenied(f"base path {base_path!r} contains '..'")
    norm = posixpath.normpath(path or "/")
    for root in roots:
        if (
            root.scheme == scheme
            and root.netloc == netloc
            and _under(norm, root.path, "/")
            and norm != root.path
        ):
            return f"{scheme}://{netloc}{norm}"
    raise PermissionDenied(f"base path {base_path!r} is outside the lake roots: {allowed}")


def _under(path: str, root: str, sep: str) -> bool:
    return path == root or path.startswith(root.rstrip(sep) + sep)


def lake_roots(texts: Iterable[str]) -> list[LakeRoot]:
    return [LakeRoot.parse(t) for t in texts]
