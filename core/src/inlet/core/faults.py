"""Named points in the write path where a test can make the process die (fault injection).

Setting ``INLET_CRASH_AT=<point>`` makes the process exit abruptly (no cleanup, like SIGKILL)
when it reaches that point. Real crashes cannot be produced on demand at an exact step; this can.
"""

from __future__ import annotations

import os

AFTER_REQUESTED = "after_requested"
AFTER_INFLIGHT = "after_inflight"
AFTER_DATA_FILES = "after_data_files"
BEFORE_COMPLETE = "before_complete"
# in a rollback: after its plan and inflight file, and after deleting the failed write's files
ROLLBACK_AFTER_PLAN = "rollback_after_plan"
ROLLBACK_AFTER_DELETE = "rollback_after_delete"
# in a clean: after its plan and inflight file, and after deleting the files
CLEAN_AFTER_PLAN = "clean_after_plan"
CLEAN_AFTER_DELETE = "clean_after_delete"
# in an archive: after the layer-0 file (no manifest yet), after manifest_N (no _version_ yet),
# after the LSM timeline holds the batch (no active file deleted), after the pending files and
# half the completed files of the batch are deleted, and after a compacted file (no manifest)
ARCHIVE_AFTER_DATA_FILE = "archive_after_data_file"
ARCHIVE_AFTER_MANIFEST = "archive_after_manifest"
ARCHIVE_AFTER_WRITE = "archive_after_write"
ARCHIVE_MID_DELETE = "archive_mid_delete"
ARCHIVE_AFTER_COMPACTED_FILE = "archive_after_compacted_file"
# in a restore: after its plan and inflight file, after the first instant is rolled back, and
# after every instant is rolled back (no completed restore yet)
RESTORE_AFTER_PLAN = "restore_after_plan"
RESTORE_MID_ROLLBACK = "restore_mid_rollback"
RESTORE_BEFORE_COMPLETE = "restore_before_complete"
CRASH_EXIT_CODE = 77


def crash_point(name: str) -> None:
    if os.environ.get("INLET_CRASH_AT") == name:
        os._exit(CRASH_EXIT_CODE)
