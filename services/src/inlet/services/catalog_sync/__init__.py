"""Catalog sync: register Inlet's Hudi tables in a Hive Metastore as Apache Hudi's HiveSyncTool does.

:func:`sync_table` is one sync of one table (``inlet catalog sync``); :mod:`.service` keeps a metastore in step
with the commit events on ``inlet.commits`` (``inlet catalog run``).
"""

from inlet.services.catalog_sync.config import SyncConfig
from inlet.services.catalog_sync.errors import CatalogSyncError, MetastoreUnavailableError
from inlet.services.catalog_sync.metastore import MetastoreClient
from inlet.services.catalog_sync.sync import SyncReport, TableSyncResult, sync_table

__all__ = [
    "CatalogSyncError",
    "MetastoreClient",
    "MetastoreUnavailableError",
    "SyncConfig",
    "SyncReport",
    "TableSyncResult",
    "sync_table",
]
