"""The gRPC servicer of ``inlet.proto.coordinator.v1.CoordinatorService``.

A thin layer: it converts messages to core types, calls :class:`Coordinator`, and turns its
errors into status codes (see the comment at the top of ``coordinator.proto``). A write conflict
is ABORTED with a message naming the other instant and the file groups, and a serialized
``Conflict`` in the trailing metadata key ``inlet-conflict-bin``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import grpc

from inlet.core.errors import InletError, InvalidInputError
from inlet.proto.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from inlet.proto.hudi.v1 import commit_pb2
from inlet.services.coordinator.commits import MODES, Coordinator, heartbeat_interval_ms
from inlet.services.coordinator.errors import Conflict, CoordinatorError, InvalidArgument
from inlet.services.coordinator.leases import Fence
from inlet.services.coordinator.store import LeaseRow, TableRow
from inlet.services.coordinator_client import convert
from inlet.services.logs import log_event

log = logging.getLogger("inlet.coordinator")

CONFLICT_METADATA_KEY = "inlet-conflict-bin"
_MODE_FROM_PROTO = {
    coordinator_pb2.CONCURRENCY_MODE_SINGLE_WRITER: MODES[0],
    coordinator_pb2.CONCURRENCY_MODE_OPTIMISTIC: MODES[1],
    coordinator_pb2.CONCURRENCY_MODE_NON_BLOCKING: MODES[2],
}
_MODE_TO_PROTO = {v: k for k, v in _MODE_FROM_PROTO.items()}

Req = TypeVar("Req")
Resp = TypeVar("Resp")


def conflict_message(e: Conflict) -> coordinator_pb2.Conflict:
    info = e.info
    state = (
        commit_pb2.INSTANT_STATE_COMPLETED
        if info.other_completion_time
        else commit_pb2.INSTANT_STATE_INFLIGHT
    )
    return coordinator_pb2.Conflict(
        other=commit_pb2.Instant(
            instant_time=info.other_time,
            action=info.other_action,
            state=state,
            completion_time=info.other_completion_time or "",
        ),
        file_groups=convert.file_groups_to_proto(info.file_groups),
    )


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("unreachable")  # context.abort raises


def _rpc(
    method: Callable[[Any, Req, grpc.ServicerContext], Resp],
) -> Callable[[Any, Req, grpc.ServicerContext], Resp]:
    """Map errors to status codes and log each call (method, table, code, elapsed)."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: Any, request: Req, context: grpc.ServicerContext) -> Resp:
        started = time.monotonic()
        table_id = getattr(request, "table_id", "")
        code = grpc.StatusCode.OK
        try:
            return method(self, request, context)
        except Conflict as e:
            code = e.code
            context.set_trailing_metadata(((CONFLICT_METADATA_KEY, conflict_message(e).SerializeToString()),))
            _abort(context, code, e.message)
        except CoordinatorError as e:
            code = e.code
            _abort(context, code, e.message)
        except InvalidInputError as e:
            code = grpc.StatusCode.INVALID_ARGUMENT
            _abort(context, code, str(e))
        except InletError as e:
            code = grpc.StatusCode.FAILED_PRECONDITION
            _abort(context, code, str(e))
        except OSError as e:
            code = grpc.StatusCode.UNAVAILABLE
            log.exception("storage error in %s on %s", name, table_id)
            _abort(context, code, f"storage error: {e}; retry the call")
        except Exception as e:  # a bug: logged with its traceback, INTERNAL for the client
            code = grpc.StatusCode.INTERNAL
            log.exception("internal error in %s on %s", name, table_id)
            _abort(context, code, f"internal error: {type(e).__name__}: {e}")
        finally:
            level = logging.DEBUG if code == grpc.StatusCode.OK else logging.INFO
            log_event(
                log,
                level,
                f"{name} {code.name}",
                method=name,
                table_id=table_id,
                code=code.name,
                elapsed_ms=round((time.monotonic() - started) * 1000, 1),
            )

    return wrapper


def table_to_proto(row: TableRow) -> coordinator_pb2.Table:
    return coordinator_pb2.Table(
        table_id=row.table_id,
        base_path=row.base_path,
        table_name=row.table_name,
        table_type=row.table_type,
        concurrency_mode=_MODE_TO_PROTO[row.concurrency_mode],
        heartbeat_timeout_ms=row.heartbeat_timeout_ms,
    )


def lease_to_proto(lease: LeaseRow) -> coordinator_pb2.Lease:
    return coordinator_pb2.Lease(
        lock_id=lease.lock_id, fencing_token=lease.fencing_token, expires_at_ms=lease.expires_at_ms
    )


class CoordinatorServicer(coordinator_pb2_grpc.CoordinatorServiceServicer):
    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator

    @_rpc
    def RegisterTable(
        self, request: coordinator_pb2.RegisterTableRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.RegisterTableResponse:
        mode = None
        if request.concurrency_mode != coordinator_pb2.CONCURRENCY_MODE_UNSPECIFIED:
            mode = _MODE_FROM_PROTO.get(request.concurrency_mode)
            if mode is None:
                raise InvalidArgument(f"unknown concurrency mode {request.concurrency_mode}")
        row = self.coordinator.register(
            request.table_id, request.base_path, mode, request.heartbeat_timeout_ms or None
        )
        return coordinator_pb2.RegisterTableResponse(table=table_to_proto(row))

    @_rpc
    def DescribeTable(
        self, request: coordinator_pb2.DescribeTableRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.DescribeTableResponse:
        row, pending, latest = self.coordinator.describe(request.table_id)
        resp = coordinator_pb2.DescribeTableResponse(
            table=table_to_proto(row), pending=[convert.instant_to_proto(i) for i in pending]
        )
        if latest is not None:
            resp.latest_completed.CopyFrom(convert.instant_to_proto(latest))
        return resp

    @_rpc
    def BeginInstant(
        self, request: coordinator_pb2.BeginInstantRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.BeginInstantResponse:
        instant, timeout = self.coordinator.begin_instant(
            request.table_id, request.action, request.requested_content, request.writer_id, request.request_id
        )
        return coordinator_pb2.BeginInstantResponse(
            instant=convert.instant_to_proto(instant),
            heartbeat_interval_ms=heartbeat_interval_ms(timeout),
            heartbeat_timeout_ms=timeout,
        )

    @_rpc
    def MarkInflight(
        self, request: coordinator_pb2.MarkInflightRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.MarkInflightResponse:
        planned = convert.file_groups_from_proto(request.planned_file_groups) or None
        instant = self.coordinator.mark_inflight(
            request.table_id, request.instant_time, request.content, planned
        )
        return coordinator_pb2.MarkInflightResponse(instant=convert.instant_to_proto(instant))

    @_rpc
    def Heartbeat(
        self, request: coordinator_pb2.HeartbeatRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.HeartbeatResponse:
        expires = self.coordinator.heartbeat(request.table_id, request.instant_time)
        return coordinator_pb2.HeartbeatResponse(expires_at_ms=expires)

    @_rpc
    def CompleteInstant(
        self, request: coordinator_pb2.CompleteInstantRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.CompleteInstantResponse:
        which = request.WhichOneof("content")
        metadata = (
            convert.metadata_from_proto(request.metadata, request.action) if which == "metadata" else None
        )
        content = request.avro_content if which == "avro_content" else None
        if metadata is None and content is None:
            content = b""
        fence = (
            Fence(request.fence.lock_name, request.fence.fencing_token) if request.HasField("fence") else None
        )
        done = self.coordinator.complete(
            request.table_id,
            request.instant_time,
            request.action,
            metadata,
            content,
            request.request_id,
            fence,
        )
        return coordinator_pb2.CompleteInstantResponse(
            instant=convert.instant_to_proto(done.instant), event_id=done.event_id
        )

    @_rpc
    def AbortInstant(
        self, request: coordinator_pb2.AbortInstantRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.AbortInstantResponse:
        done = self.coordinator.abort(request.table_id, request.instant_time, request.reason)
        return coordinator_pb2.AbortInstantResponse(
            rollback_instant_time=done.rollback_instant_time, deleted_files=list(done.deleted_files)
        )

    @_rpc
    def GetTimeline(
        self, request: coordinator_pb2.GetTimelineRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.GetTimelineResponse:
        instants = self.coordinator.instants(request.table_id, request.include_pending)
        return coordinator_pb2.GetTimelineResponse(instants=[convert.instant_to_proto(i) for i in instants])

    @_rpc
    def AcquireLock(
        self, request: coordinator_pb2.AcquireLockRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.AcquireLockResponse:
        lease = self.coordinator.leases.acquire(
            request.table_id, request.owner, request.lease_ms, request.wait_ms, request.lock_name
        )
        return coordinator_pb2.AcquireLockResponse(lease=lease_to_proto(lease))

    @_rpc
    def RenewLock(
        self, request: coordinator_pb2.RenewLockRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.RenewLockResponse:
        lease = self.coordinator.leases.renew(request.table_id, request.lock_id, request.lease_ms)
        return coordinator_pb2.RenewLockResponse(lease=lease_to_proto(lease))

    @_rpc
    def ReleaseLock(
        self, request: coordinator_pb2.ReleaseLockRequest, context: grpc.ServicerContext
    ) -> coordinator_pb2.ReleaseLockResponse:
        self.coordinator.leases.release(request.table_id, request.lock_id)
        return coordinator_pb2.ReleaseLockResponse()
