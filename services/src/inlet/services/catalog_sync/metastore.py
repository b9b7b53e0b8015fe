"""A Hive Metastore Thrift client (``hmsclient``) that counts its calls and names its failures.

Thrift transport failures (connection refused, reset, timeouts) become :class:`MetastoreUnavailableError`
(retryable); the metastore's own exceptions (``MetaException``, ``InvalidOperationException``, ...) become
:class:`CatalogSyncError` carrying the metastore's message.
"""

from __future__ import annotations

import contextlib
import socket
from collections import Counter
from collections.abc import Callable
from typing import Any

from inlet.services.catalog_sync.errors import CatalogSyncError, MetastoreUnavailableError
from inlet.services.catalog_sync.transport import MetastoreSecurity, explain

DEFAULT_TIMEOUT_S = 60.0


def parse_metastore_uri(uri: str) -> tuple[str, int]:
    """``thrift://host:port`` (the first of a comma-separated list) -> (host, port)."""
    from inlet.services.stack.metastore import parse_uri

    first = uri.split(",")[0].strip()
    try:
        return parse_uri(first)
    except ValueError as e:
        raise CatalogSyncError(str(e)) from None


def _is_transport_error(exc: BaseException) -> bool:
    from thrift.transport.TTransport import TTransportException

    return isinstance(exc, (TTransportException, OSError, socket.timeout, EOFError, BrokenPipeError))


class MetastoreClient:
    """One connection to a metastore; every Thrift call goes through :meth:`call` and is counted."""

    def __init__(
        self, uri: str, timeout_s: float = DEFAULT_TIMEOUT_S, security: MetastoreSecurity | None = None
    ) -> None:
        self.uri = uri
        self.host, self.port = parse_metastore_uri(uri)
        self.timeout_s = timeout_s
        self.security = security or MetastoreSecurity()
        self.calls: Counter[str] = Counter()
        self._client: Any = None
        self._answered = False  # a call succeeded on this connection (a later failure is no mismatch)

    def _unavailable(self, what: str, exc: BaseException) -> MetastoreUnavailableError:
        hint = "" if self._answered else explain(exc, self.security, self.timeout_s)
        message = f"{what} ({self.security.describe()}): {exc}"
        return MetastoreUnavailableError(f"{message}; {hint}" if hint else message)

    def open(self) -> MetastoreClient:
        from inlet.services.stack.metastore import open_client

        if self._client is None:
            try:
                self._client = open_client(self.host, self.port, self.timeout_s, self.security)
            except Exception as e:
                if _is_transport_error(e):
                    raise self._unavailable(f"cannot reach the metastore at {self.uri}", e) from e
                raise
            self._answered = False
        return self

    def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):  # closing a broken transport may fail
                self._client.close()
            self._client = None

    def __enter__(self) -> MetastoreClient:
        return self  # connects on the first call (a bad table path is reported before a bad metastore)

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, *args: Any) -> Any:
        """``client.<method>(*args)``; counts it; maps errors (a transport error closes the connection)."""
        from hmsclient.genthrift.hive_metastore import ttypes

        self.open()
        self.calls[method] += 1
        fn: Callable[..., Any] = getattr(self._client, method)
        try:
            result = fn(*args)
            self._answered = True
            return result
        except (ttypes.NoSuchObjectException, ttypes.AlreadyExistsException):
            raise
        except Exception as e:
            if _is_transport_error(e):
                error = self._unavailable(f"metastore {self.uri} failed during {method}", e)
                self.close()
                raise error from e
            message = getattr(e, "message", None) or str(e) or type(e).__name__
            raise CatalogSyncError(f"metastore {method} failed: {type(e).__name__}: {message}") from e

    def get_table(self, database: str, table: str) -> Any:
        """The metastore's table (raises ``NoSuchObjectException``), by ``get_table_req``: Hive 4.0.1
        removed the older ``get_table`` call (HIVE-26537); Hive 2.3 and later serve ``get_table_req``."""
        from hmsclient.genthrift.hive_metastore.ttypes import GetTableRequest

        return self.call("get_table_req", GetTableRequest(dbName=database, tblName=table)).table

    def reset_counts(self) -> None:
        self.calls.clear()
