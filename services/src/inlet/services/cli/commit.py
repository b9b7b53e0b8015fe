"""``--coordinator HOST:PORT --table-id ID``: CLI writes, compactions and rollbacks commit through the
commit coordinator, so they take part in its concurrency control (OCC/NBCC) and publish commit events.

Without ``--coordinator`` a command commits on its own (the table lock and clock of this machine).
With it, the table is registered under ``--table-id`` if it is not yet (keeping the mode it has when it
is), and every instant is begun, heartbeated and completed by the coordinator.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from inlet.core import HudiTable
from inlet.core.commit.protocol import CommitProtocol
from inlet.services.cli.errors import UsageError
from inlet.services.runtime import Setting, SettingsError, add_arguments, resolve

if TYPE_CHECKING:  # the gRPC client is imported only by commands that use it
    from inlet.services.coordinator_client.client import CoordinatorClient

ENV_PREFIX = "INLET_"
TOKEN_SETTING = Setting(
    "coordinator_token",
    "--coordinator-token",
    "bearer token for the coordinator (visible in process listings: prefer --coordinator-token-file)",
    metavar="TOKEN",
)
TOKEN_FILE_SETTING = Setting(
    "coordinator_token_file",
    "--coordinator-token-file",
    "file holding the bearer token for the coordinator (e.g. a mounted Secret), read at start",
    metavar="FILE",
)
CA_SETTING = Setting(
    "coordinator_ca",
    "--coordinator-ca",
    "PEM file of the CA that signed the coordinator's certificate (turns TLS on)",
    metavar="FILE",
)
COORDINATOR_TLS_SETTING = Setting(
    "coordinator_tls",
    "--coordinator-tls",
    "use TLS to the coordinator with the system's trusted CAs",
    kind="bool",
    default=False,
)
SETTINGS = (
    Setting(
        "coordinator",
        "--coordinator",
        "commit through the commit coordinator at HOST:PORT (OCC/NBCC, commit events) instead of alone",
        metavar="HOST:PORT",
    ),
    Setting(
        "table_id",
        "--table-id",
        "the table's id at the coordinator, e.g. sales.public.orders (required with --coordinator)",
        metavar="ID",
    ),
    TOKEN_SETTING,
    TOKEN_FILE_SETTING,
    CA_SETTING,
    COORDINATOR_TLS_SETTING,
)


# how a long-running service reaches the coordinator (its address is required there)
CONNECTION_SETTINGS = (
    Setting("coordinator", "--coordinator", "commit coordinator address", required=True, metavar="HOST:PORT"),
    TOKEN_SETTING,
    TOKEN_FILE_SETTING,
    CA_SETTING,
    COORDINATOR_TLS_SETTING,
)


def coordinator_token(v: Mapping[str, Any]) -> str | None:
    """The bearer token of resolved settings: ``--coordinator-token``, or the content of
    ``--coordinator-token-file`` (surrounding whitespace stripped); a one-line error if both are
    given or the file is unreadable or empty."""
    token, path = v.get("coordinator_token"), v.get("coordinator_token_file")
    if token and path:
        raise UsageError("give --coordinator-token or --coordinator-token-file, not both")
    if not path:
        return token or None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(
            f"--coordinator-token-file: cannot read {path}: {getattr(e, 'strerror', e)}"
        ) from None
    if not text or "\n" in text:
        raise UsageError(f"--coordinator-token-file: {path} should hold the token alone, on one line")
    return text


def read_ca(path: str | None) -> bytes | None:
    """The PEM bytes of ``--coordinator-ca`` (None when not given); a one-line error if unreadable."""
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UsageError(f"--coordinator-ca: cannot read {path}: {e.strerror}") from None


def add_coordinator_options(p: argparse.ArgumentParser) -> None:
    add_arguments(p.add_argument_group("commit coordinator"), SETTINGS, ENV_PREFIX)


@contextlib.contextmanager
def commit_protocol(args: argparse.Namespace, path: str) -> Iterator[CommitProtocol | None]:
    """The coordinator's commit protocol for the table at ``path`` (None: commit alone)."""
    with coordinator_session(args, path) as session:
        yield None if session is None else session[2]


@contextlib.contextmanager
def coordinator_session(
    args: argparse.Namespace, path: str
) -> Iterator[tuple[CoordinatorClient, str, CommitProtocol] | None]:
    """``(client, table id, commit protocol)`` of the table at ``path`` when ``--coordinator`` is
    given (the table registered there), else None."""
    try:
        v = resolve(args, SETTINGS, ENV_PREFIX)
    except SettingsError as e:
        raise UsageError(str(e)) from None
    if not v["coordinator"]:
        if v["table_id"]:
            raise UsageError("--table-id needs --coordinator (or INLET_COORDINATOR)")
        yield None
        return
    if not v["table_id"]:
        raise UsageError(
            "--coordinator needs --table-id (or INLET_TABLE_ID): the table's id at the coordinator"
        )
    ca = read_ca(v["coordinator_ca"])
    from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol

    with CoordinatorClient(
        v["coordinator"], root_certificates=ca, token=coordinator_token(v), tls=bool(v["coordinator_tls"])
    ) as client:
        client.register_table(v["table_id"], path)  # idempotent; an existing table keeps its mode
        protocol = GrpcCommitProtocol(client, v["table_id"], HudiTable.open(path).storage)
        try:
            yield client, v["table_id"], protocol
        finally:
            protocol.close()


@contextlib.contextmanager
def open_table(args: argparse.Namespace, path: str) -> Iterator[HudiTable]:
    """The table at ``path``, committing through the coordinator when ``--coordinator`` is given."""
    with commit_protocol(args, path) as protocol:
        yield HudiTable.open(path, commit_protocol=protocol)
