"""Bearer-token authentication with per-table scopes, as a gRPC server interceptor.

The tokens file is JSON::

    {"tokens": [{"name": "cdc-writer", "token": "s3cr3t", "tables": ["sales.*", "hr.people"]},
                {"name": "admin", "token": "...", "tables": ["*"]}]}

``tables`` are shell-style patterns (``fnmatch``, case-sensitive) over table ids. Clients send
``authorization: Bearer <token>``. A missing or unknown token is UNAUTHENTICATED; a token whose
patterns do not match the request's ``table_id`` is PERMISSION_DENIED. The health and reflection
services need no token.

The file is reloaded when it changes (:class:`TokenFile`: its size, modification time or inode, checked
at most once a second on calls), so tokens are added and revoked without a restart; Kubernetes'
atomic update of a mounted Secret is such a change. A file that no longer parses is reported and
ignored: the tokens in force stay until it is fixed.
"""

from __future__ import annotations

import fnmatch
import hmac
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from inlet.services.logs import log_event

log = logging.getLogger("inlet.coordinator.auth")

AUTHORIZATION = "authorization"
EXEMPT_PREFIXES = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)


@dataclass(frozen=True)
class Token:
    name: str
    secret: str
    tables: tuple[str, ...]

    def allows(self, table_id: str) -> bool:
        return any(fnmatch.fnmatchcase(table_id, pattern) for pattern in self.tables)


class TokenError(ValueError):
    """The tokens file is unreadable or malformed."""


def load_tokens(path: str) -> list[Token]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise TokenError(f"cannot read the tokens file {path}: {e}") from e
    entries = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise TokenError(f'tokens file {path}: expected {{"tokens": [{{"token": ..., "tables": [...]}}]}}')
    tokens = []
    for i, entry in enumerate(entries):
        secret = entry.get("token") if isinstance(entry, dict) else None
        tables = entry.get("tables") if isinstance(entry, dict) else None
        if not isinstance(secret, str) or len(secret) < 8:
            raise TokenError(f"tokens file {path}: entry {i} needs a 'token' string of at least 8 characters")
        if not isinstance(tables, list) or not all(isinstance(t, str) and t for t in tables):
            raise TokenError(f"tokens file {path}: entry {i} needs 'tables', a list of table id patterns")
        tokens.append(Token(str(entry.get("name") or f"token-{i}"), secret, tuple(tables)))
    secrets = [t.secret for t in tokens]
    if len(set(secrets)) != len(secrets):
        raise TokenError(f"tokens file {path}: the same token appears twice")
    return tokens


class TokenFile:
    """The tokens of a file, reloaded when the file changes (checked at most every ``check_interval_s``)."""

    def __init__(self, path: str, check_interval_s: float = 1.0) -> None:
        self.path = path
        self.check_interval_s = check_interval_s
        self.last_error: TokenError | None = None
        self._lock = threading.Lock()
        self._signature = self._stat()
        self._tokens = load_tokens(path)  # a bad file at start is an error, not a warning
        self._checked = time.monotonic()

    def _stat(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self.path)  # follows symlinks: Kubernetes swaps the ..data link
        except OSError:
            return None
        return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)

    def tokens(self) -> list[Token]:
        now = time.monotonic()
        if now - self._checked < self.check_interval_s:
            return self._tokens
        with self._lock:
            if now - self._checked < self.check_interval_s:
                return self._tokens
            self._checked = now
            signature = self._stat()
            if signature != self._signature:
                self._reload(signature)
        return self._tokens

    def _reload(self, signature: tuple[int, int, int, int] | None) -> None:
        try:
            tokens = load_tokens(self.path)
        except TokenError as e:
            if str(e) != str(self.last_error):
                log_event(log, logging.ERROR, f"keeping the tokens in force: {e}", path=self.path)
            self.last_error = e
            return  # signature not recorded: retried on the next check
        self._signature = signature
        self._tokens = tokens
        self.last_error = None
        log_event(log, logging.INFO, "tokens file reloaded", path=self.path, tokens=[t.name for t in tokens])


def bearer(metadata: Sequence[tuple[str, Any]] | None) -> str | None:
    for key, value in metadata or ():
        if key.lower() == AUTHORIZATION and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def _deny(code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    def handler(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(code, message)

    return grpc.unary_unary_rpc_method_handler(handler)


class TokenAuthInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, source: TokenFile) -> None:
        self.source = source

    def lookup(self, secret: str | None) -> Token | None:
        if not secret:
            return None
        found = None
        for token in self.source.tokens():  # compare with every token in constant time
            if hmac.compare_digest(token.secret.encode(), secret.encode()):
                found = token
        return found

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        method: str = handler_call_details.method
        if method.startswith(EXEMPT_PREFIXES):
            return continuation(handler_call_details)
        secret = bearer(handler_call_details.invocation_metadata)
        token = self.lookup(secret)
        if token is None:
            why = "missing bearer token" if not secret else "unknown token"
            log_event(log, logging.WARNING, f"unauthenticated call to {method}: {why}", method=method)
            return _deny(grpc.StatusCode.UNAUTHENTICATED, f"{why}: send 'authorization: Bearer <token>'")
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary

        def scoped(request: Any, context: grpc.ServicerContext) -> Any:
            table_id = getattr(request, "table_id", None)
            if table_id is not None and not token.allows(table_id):
                log_event(
                    log,
                    logging.WARNING,
                    f"token {token.name} denied table {table_id!r}",
                    method=method,
                    token=token.name,
                    table_id=table_id,
                )
                context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"token {token.name!r} is not allowed on table {table_id!r} (scopes: {', '.join(token.tables)})",
                )
            return inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            scoped,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
