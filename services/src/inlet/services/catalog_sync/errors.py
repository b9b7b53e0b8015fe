"""Errors of catalog sync."""

from __future__ import annotations


class CatalogSyncError(Exception):
    """A table cannot be synced as asked (bad option, incompatible schema change, unreadable table).

    Retrying does not help; the message says what to change.
    """


class MetastoreUnavailableError(CatalogSyncError):
    """The metastore could not be reached or failed mid-call; a later retry may succeed."""
