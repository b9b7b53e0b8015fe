"""Errors of the coordinator, each carrying the gRPC status code the service answers with."""

from __future__ import annotations

from dataclasses import dataclass

import grpc


class CoordinatorError(Exception):
    """A request the coordinator refuses; ``code`` is its gRPC status."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(CoordinatorError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(CoordinatorError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(CoordinatorError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(CoordinatorError):
    code = grpc.StatusCode.PERMISSION_DENIED


class FailedPrecondition(CoordinatorError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class LockHeld(CoordinatorError):
    """The table lock is held by another owner (ABORTED: retry later)."""

    code = grpc.StatusCode.ABORTED


class Unavailable(CoordinatorError):
    code = grpc.StatusCode.UNAVAILABLE


@dataclass(frozen=True)
class ConflictInfo:
    """The instant a write conflicts with and the file groups both touched."""

    other_time: str
    other_action: str
    other_completion_time: str | None  # None: the other instant is still pending (clustering)
    file_groups: tuple[tuple[str, str], ...]


class Conflict(CoordinatorError):
    """A write conflict (ABORTED): the message names the other instant and the file groups."""

    code = grpc.StatusCode.ABORTED

    def __init__(self, message: str, info: ConflictInfo) -> None:
        super().__init__(message)
        self.info = info
