"""The coordinator's client: :class:`CoordinatorClient` (one channel) and :class:`GrpcCommitProtocol`.

>>> client = CoordinatorClient("coord:50551", root_certificates=ca_pem, token="s3cr3t")
>>> client.register_table("sales.orders", "/lake/sales/orders")
>>> protocol = GrpcCommitProtocol(client, "sales.orders", Storage("/lake/sales/orders"))
>>> HudiTable.open("/lake/sales/orders", commit_protocol=protocol).write(batch, "upsert")

Calls failing with UNAVAILABLE (coordinator restarting, database unreachable) are retried with
exponential backoff; ``BeginInstant`` and ``CompleteInstant`` carry a request id that stays the
same across the retries, so a retry whose first attempt did reach the server gets the same
answer. Errors are :class:`CoordinatorCallError` (an :class:`InletError` with the status code);
a write conflict is :class:`ConflictError`, a :class:`CommitConflictError`.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import grpc

from inlet.core import avro
from inlet.core.commit.protocol import CommitProtocol
from inlet.core.config import TableConfig
from inlet.core.errors import CommitConflictError, InletError
from inlet.core.storage import Storage
from inlet.core.table import properties as props_io
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Action, Instant, State
from inlet.proto.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from inlet.services.coordinator_client import convert

log = logging.getLogger("inlet.coordinator.client")

CONFLICT_METADATA_KEY = "inlet-conflict-bin"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# a lock wait the server did not hold is retried after 10 ms, doubling up to 200 ms (with jitter)
LOCK_RETRY_MIN_S = 0.01
LOCK_RETRY_MAX_S = 0.2
MODES = {
    None: coordinator_pb2.CONCURRENCY_MODE_UNSPECIFIED,
    "SINGLE_WRITER": coordinator_pb2.CONCURRENCY_MODE_SINGLE_WRITER,
    "OPTIMISTIC": coordinator_pb2.CONCURRENCY_MODE_OPTIMISTIC,
    "NON_BLOCKING": coordinator_pb2.CONCURRENCY_MODE_NON_BLOCKING,
}
Resp = TypeVar("Resp")


class CoordinatorCallError(InletError):
    """A coordinator call failed; ``code`` is its gRPC status code."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"coordinator {method}: {code.name}: {details}")
        self.method = method
        self.code = code
        self.details = details


class ConflictError(CommitConflictError):
    """ABORTED write conflict; ``conflict`` names the other instant and the file groups (if sent)."""

    def __init__(self, method: str, details: str, conflict: coordinator_pb2.Conflict | None) -> None:
        super().__init__(details)
        self.method = method
        self.code = grpc.StatusCode.ABORTED
        self.details = details
        self.conflict = conflict


def _error(method: str, e: grpc.RpcError) -> InletError:
    code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
    details = (e.details() if hasattr(e, "details") else None) or str(e)
    if code == grpc.StatusCode.ABORTED:
        conflict = None
        trailing = e.trailing_metadata() if hasattr(e, "trailing_metadata") else None
        for key, value in trailing or ():
            if key == CONFLICT_METADATA_KEY and isinstance(value, bytes):
                conflict = coordinator_pb2.Conflict.FromString(value)
        if conflict is not None or method in ("CompleteInstant", "MarkInflight"):
            return ConflictError(method, details, conflict)
    return CoordinatorCallError(method, code, details)


def _loopback(target: str) -> bool:
    """Whether a gRPC target (``HOST:PORT``, ``[v6]:PORT``, ``dns:...``, ``unix:...``) stays on this host."""
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    host = target.split("///")[-1].removeprefix("dns:").removeprefix("ipv4:").removeprefix("ipv6:")
    host = host.rsplit(":", 1)[0] if host.count(":") == 1 or host.startswith("[") else host
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def default_writer_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class CoordinatorClient:
    """One channel to a coordinator, with optional TLS and bearer token."""

    def __init__(
        self,
        target: str,
        *,
        tls: bool = False,
        root_certificates: bytes | None = None,
        server_name: str | None = None,
        token: str | None = None,
        timeout_s: float = 60.0,
        retries: int = 8,
        backoff_s: float = 0.1,
        max_backoff_s: float = 5.0,
    ) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        if token and not (tls or root_certificates is not None) and not _loopback(target):
            raise InletError(
                f"refusing to send the coordinator token in plaintext to {target}: use TLS "
                "(--coordinator-tls, or --coordinator-ca FILE); without TLS only a loopback address"
            )
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ]
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        if tls or root_certificates is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=root_certificates)
            self.channel = grpc.secure_channel(target, creds, options=options)
        else:
            self.channel = grpc.insecure_channel(target, options=options)
        self.stub = coordinator_pb2_grpc.CoordinatorServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(
        self, method: str, request: Any, retries: int | None = None, timeout_s: float | None = None
    ) -> Any:
        """Call ``method`` with ``request``, retrying UNAVAILABLE with exponential backoff and jitter."""
        fn: Callable[..., Any] = getattr(self.stub, method)
        attempts = (self.retries if retries is None else retries) + 1
        delay = self.backoff_s
        for attempt in range(attempts):
            try:
                return fn(request, timeout=timeout_s or self.timeout_s, metadata=self._metadata)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or attempt == attempts - 1:
                    raise _error(method, e) from None
                log.info(
                    "coordinator %s unavailable (%s); retry %d in %.2fs",
                    method,
                    e.details(),
                    attempt + 1,
                    delay,
                )
                time.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, self.max_backoff_s)
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ tables

    def register_table(
        self, table_id: str, base_path: str, mode: str | None = None, heartbeat_timeout_ms: int = 0
    ) -> coordinator_pb2.Table:
        req = coordinator_pb2.RegisterTableRequest(
            table_id=table_id,
            base_path=base_path,
            concurrency_mode=MODES[mode.upper() if mode else None],
            heartbeat_timeout_ms=heartbeat_timeout_ms,
        )
        return self.call("RegisterTable", req).table  # type: ignore[no-any-return]

    def describe_table(self, table_id: str) -> coordinator_pb2.DescribeTableResponse:
        return self.call("DescribeTable", coordinator_pb2.DescribeTableRequest(table_id=table_id))  # type: ignore[no-any-return]

    def get_timeline(self, table_id: str, include_pending: bool = False) -> list[Instant]:
        req = coordinator_pb2.GetTimelineRequest(table_id=table_id, include_pending=include_pending)
        return [convert.instant_from_proto(i) for i in self.call("GetTimeline", req).instants]

    # ------------------------------------------------------------------ instants

    def begin_instant(
        self,
        table_id: str,
        action: str,
        requested_content: bytes = b"",
        writer_id: str = "",
        request_id: str | None = None,
    ) -> coordinator_pb2.BeginInstantResponse:
        req = coordinator_pb2.BeginInstantRequest(
            table_id=table_id,
            action=action,
            requested_content=requested_content,
            writer_id=writer_id,
            request_id=request_id or uuid.uuid4().hex,
        )
        return self.call("BeginInstant", req)  # type: ignore[no-any-return]

    def mark_inflight(
        self,
        table_id: str,
        instant_time: str,
        content: bytes = b"",
        planned_file_groups: Iterable[tuple[str, str]] | None = None,
    ) -> Instant:
        req = coordinator_pb2.MarkInflightRequest(
            table_id=table_id,
            instant_time=instant_time,
            content=content,
            planned_file_groups=convert.file_groups_to_proto(planned_file_groups or ()),
        )
        return convert.instant_from_proto(self.call("MarkInflight", req).instant)

    def heartbeat(self, table_id: str, instant_time: str, retries: int | None = None) -> int:
        req = coordinator_pb2.HeartbeatRequest(table_id=table_id, instant_time=instant_time)
        return int(self.call("Heartbeat", req, retries=retries).expires_at_ms)

    def complete_instant(
        self,
        table_id: str,
        instant_time: str,
        action: str,
        metadata: CommitMetadata | None = None,
        avro_content: bytes | None = None,
        request_id: str | None = None,
        fence: tuple[str, int] | None = None,
    ) -> coordinator_pb2.CompleteInstantResponse:
        """Complete an instant; ``fence`` = (lock name, fencing token) of a lease the caller holds:
        refused (FAILED_PRECONDITION) unless that lease is still the lock's grant."""
        req = coordinator_pb2.CompleteInstantRequest(
            table_id=table_id,
            instant_time=instant_time,
            action=action,
            request_id=request_id or uuid.uuid4().hex,
        )
        if fence is not None:
            req.fence.lock_name, req.fence.fencing_token = fence
        if metadata is not None:
            req.metadata.CopyFrom(convert.metadata_to_proto(metadata))
        else:
            req.avro_content = avro_content or b""
        return self.call("CompleteInstant", req)  # type: ignore[no-any-return]

    def abort_instant(
        self, table_id: str, instant_time: str, reason: str = ""
    ) -> coordinator_pb2.AbortInstantResponse:
        req = coordinator_pb2.AbortInstantRequest(table_id=table_id, instant_time=instant_time, reason=reason)
        return self.call("AbortInstant", req)  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ locks

    def acquire_lock(
        self, table_id: str, owner: str, lease_ms: int = 0, wait_ms: int = 0, lock_name: str = ""
    ) -> coordinator_pb2.Lease:
        """The table's lock ``lock_name`` ("": its write lock), waiting up to ``wait_ms`` for its holder. The server waits only while it
        has a free lock-wait slot and may answer ABORTED early (see ``AcquireLockRequest.wait_ms``);
        the wait then goes on here: the call is repeated with the rest of ``wait_ms`` (backing
        off from 10 ms to 200 ms) until the lock is granted or the time is up (ABORTED)."""
        deadline = time.monotonic() + wait_ms / 1000
        delay = LOCK_RETRY_MIN_S
        while True:
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            req = coordinator_pb2.AcquireLockRequest(
                table_id=table_id, owner=owner, lease_ms=lease_ms, wait_ms=remaining_ms, lock_name=lock_name
            )
            try:
                return self.call(  # type: ignore[no-any-return]
                    "AcquireLock", req, timeout_s=self.timeout_s + remaining_ms / 1000
                ).lease
            except CoordinatorCallError as e:
                left = deadline - time.monotonic()
                if e.code != grpc.StatusCode.ABORTED or left <= 0:
                    raise
                time.sleep(min(left, delay * (0.5 + random.random() / 2)))
                delay = min(delay * 2, LOCK_RETRY_MAX_S)

    def renew_lock(self, table_id: str, lock_id: str, lease_ms: int = 0) -> coordinator_pb2.Lease:
        req = coordinator_pb2.RenewLockRequest(table_id=table_id, lock_id=lock_id, lease_ms=lease_ms)
        return self.call("RenewLock", req).lease  # type: ignore[no-any-return]

    def release_lock(self, table_id: str, lock_id: str) -> None:
        self.call("ReleaseLock", coordinator_pb2.ReleaseLockRequest(table_id=table_id, lock_id=lock_id))


class _Heartbeats:
    """Heartbeat RPCs for the instants a protocol has begun, from one daemon thread."""

    def __init__(self, client: CoordinatorClient, table_id: str) -> None:
        self.client = client
        self.table_id = table_id
        self._due: dict[str, tuple[float, float]] = {}  # instant -> (interval s, next beat monotonic)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self, instant_time: str, interval_ms: int) -> None:
        with self._cond:
            interval = max(interval_ms, 10) / 1000
            self._due[instant_time] = (interval, time.monotonic() + interval)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name=f"coordinator-heartbeat-{self.table_id}", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def stop(self, instant_time: str) -> None:
        with self._cond:
            self._due.pop(instant_time, None)
            self._cond.notify_all()

    def live(self) -> list[str]:
        with self._cond:
            return sorted(self._due)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._due.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed or not self._due:
                    self._thread = None  # idle: the next start() makes a new thread
                    return
                now = time.monotonic()
                due = [t for t, (_i, at) in self._due.items() if at <= now]
                if not due:
                    wake = min(at for _i, at in self._due.values())
                    self._cond.wait(max(0.0, wake - now))
                    continue
                for t in due:
                    interval, _at = self._due[t]
                    self._due[t] = (interval, now + interval)
            for t in due:
                self._beat(t)

    def _beat(self, instant_time: str) -> None:
        try:
            self.client.heartbeat(self.table_id, instant_time, retries=1)
        except CoordinatorCallError as e:
            if e.code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
                log.warning("stopping heartbeats of %s %s: %s", self.table_id, instant_time, e.details)
                self.stop(instant_time)
            else:  # a missed beat only shortens the writer's lease
                log.info("heartbeat of %s %s failed: %s", self.table_id, instant_time, e)
        except Exception:
            log.exception("heartbeat of %s %s failed", self.table_id, instant_time)


class GrpcCommitProtocol(CommitProtocol):
    """Core's commit protocol through the coordinator, for one registered table.

    ``begin`` also starts Heartbeat RPCs for the instant, until it completes, finishes, fails to
    complete or is rolled back. The timeline is read from ``storage`` directly.
    """

    serialises_commits = True

    def __init__(
        self,
        client: CoordinatorClient,
        table_id: str,
        storage: Storage,
        writer_id: str | None = None,
        layout_version: int | None = None,
        timeline_path: str | None = None,
    ) -> None:
        self.client = client
        self.table_id = table_id
        self.storage = storage
        self.writer_id = writer_id or default_writer_id()
        if layout_version is None or timeline_path is None:
            props = props_io.read_properties(storage)
            layout_version = layout_version or TableConfig.TIMELINE_LAYOUT_VERSION.require(props)
            timeline_path = timeline_path or TableConfig.TIMELINE_PATH.require(props)
        self.layout_version = layout_version
        self.timeline_path = timeline_path
        self.heartbeats = _Heartbeats(client, table_id)
        # (lock name, fencing token) of a lease held while writing: completions carry it
        self.fence: tuple[str, int] | None = None

    def close(self) -> None:
        self.heartbeats.close()

    def timeline(self) -> Timeline:
        return Timeline.load(self.storage, self.layout_version, self.timeline_path)

    def begin(self, action: str, requested_content: bytes = b"") -> Instant:
        resp = self.client.begin_instant(self.table_id, action, requested_content, self.writer_id)
        instant = convert.instant_from_proto(resp.instant)
        self.heartbeats.start(instant.time, int(resp.heartbeat_interval_ms))
        if action == Action.ROLLBACK:
            target = _rollback_target(requested_content)
            if target:
                self.heartbeats.stop(target)  # the instant being rolled back is ours no longer
        return Instant(instant.time, action, State.REQUESTED)

    def set_inflight(
        self,
        instant: Instant,
        content: bytes = b"",
        planned_file_groups: Iterable[tuple[str, str]] | None = None,
    ) -> Instant:
        planned: Sequence[tuple[str, str]] | None = list(planned_file_groups) if planned_file_groups else None
        if planned is None and content and instant.action in Action.WRITE_ACTIONS:
            try:
                planned = sorted(CommitMetadata.from_bytes(content).touched_file_groups())
            except InletError:
                planned = None
        try:
            self.client.mark_inflight(self.table_id, instant.time, content, planned)
        except ConflictError:
            raise
        except CoordinatorCallError as e:
            if e.code == grpc.StatusCode.FAILED_PRECONDITION:
                raise CommitConflictError(e.details) from e
            raise
        return Instant(instant.time, instant.action, State.INFLIGHT)

    def complete(self, instant: Instant, metadata: CommitMetadata) -> Instant:
        try:
            resp = self.client.complete_instant(
                self.table_id, instant.time, instant.action, metadata=metadata, fence=self.fence
            )
        except ConflictError:
            raise
        except CoordinatorCallError as e:
            if e.code == grpc.StatusCode.FAILED_PRECONDITION:  # rolled back meanwhile: retry the write
                raise CommitConflictError(e.details) from e
            raise
        finally:
            self.heartbeats.stop(instant.time)
        return convert.instant_from_proto(resp.instant)

    def finish(self, instant: Instant, content: bytes) -> Instant:
        try:
            resp = self.client.complete_instant(
                self.table_id, instant.time, instant.action, avro_content=content, fence=self.fence
            )
        finally:
            self.heartbeats.stop(instant.time)
        return convert.instant_from_proto(resp.instant)

    def abort(self, instant: Instant, reason: str = "") -> str:
        """Have the coordinator roll the instant back; returns the rollback instant time."""
        self.heartbeats.stop(instant.time)
        return self.client.abort_instant(self.table_id, instant.time, reason).rollback_instant_time


def _rollback_target(plan: bytes) -> str | None:
    try:
        decoded = avro.decode(plan, "rollback plan")
    except InletError:
        return None
    target = (decoded.get("instantToRollback") or {}).get("commitTime")
    return str(target) if target else None
