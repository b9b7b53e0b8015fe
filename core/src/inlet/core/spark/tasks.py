"""What Spark write and compaction jobs share: the internal column names, running a job so that an executor's Inlet error reaches the caller as that error, and the task-side helpers (task ids for write tokens, write stats as JSON, fault injection)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Callable
from typing import TypeVar

from pyspark import TaskContext
from pyspark.sql import Column
from pyspark.sql import functions as F

from inlet.core import errors, faults
from inlet.core.errors import (
    InletError,
)
from inlet.core.storage import Storage
from inlet.core.timeline.commit_metadata import WriteStat

log = logging.getLogger(__name__)

SEQ = "__inlet_seq"  # arrival number: (Spark partition << 33) + row number, like monotonically_increasing_id
BUCKET = "__inlet_bucket"
TAGGED = "__inlet_tagged_file_id"  # the file group the simple index found the key in
FILE_ID = "__inlet_file_id"  # the file group a record is written to
FRACTION = "__inlet_fraction"  # a key's place in [0, 1), spreading inserts over file groups
_NAME = "__inlet_file_name"
_ROW = "__inlet_row"
SEQ_SHIFT = 33
HASH_BITS = 53
STATS_SCHEMA = "partition string, stat string"

R = TypeVar("R")


_ERROR_CLASSES: dict[str, type[InletError]] = {
    name: cls for name, cls in vars(errors).items() if isinstance(cls, type) and issubclass(cls, InletError)
}
_ERROR_LINE = re.compile(r"(?:inlet\.core\.errors\.)?\b(" + "|".join(_ERROR_CLASSES) + r"): (.*)")


def executor_error(e: BaseException) -> InletError | None:
    """The Inlet error an executor raised, recovered from a Spark job failure (Spark reports it as
    a ``PythonException`` carrying the worker's traceback text), or None."""
    if isinstance(e, InletError):
        return e
    found = _ERROR_LINE.findall(str(e))
    if not found:
        return None
    name, message = found[-1]
    return _ERROR_CLASSES[name](message.strip())


def run_job(what: str, action: Callable[[], R]) -> R:
    """Run a Spark action; an Inlet error raised on an executor is raised again as itself."""
    try:
        return action()
    except Exception as e:
        inlet = executor_error(e)
        if inlet is None or inlet is e:
            raise
        log.debug("%s failed on an executor: %s", what, e)
        raise inlet from None


def col(name: str) -> Column:
    """A column by its exact name (dots and other characters quoted)."""
    return F.col("`" + name.replace("`", "``") + "`")


def stat_json(stat: WriteStat) -> str:
    return json.dumps(dataclasses.asdict(stat), separators=(",", ":"))


def stat_of(text: str) -> WriteStat:
    return WriteStat(**json.loads(text))


def task_ids() -> tuple[int, int, int, int]:
    """(partition id, stage id, task attempt id, attempt number) of the running task."""
    tc = TaskContext.get()
    if tc is None:
        return 0, 0, 0, 0
    return tc.partitionId(), tc.stageId(), tc.taskAttemptId(), tc.attemptNumber()


def maybe_crash(point: str | None, here: str, chosen: bool) -> None:
    """Fault injection (tests): die like a killed executor at ``point`` in the first attempt of a
    ``chosen`` task, through the core's :func:`inlet.core.faults.crash_point`."""
    if point != here or not chosen or task_ids()[3] != 0:
        return
    os.environ["INLET_CRASH_AT"] = point
    faults.crash_point(point)


def spark_path(storage: Storage, rel: str) -> str:
    """A URI Spark reads a table file by (``file://`` for local paths, whatever the default FS)."""
    uri = storage.base_uri
    if "://" not in uri:
        uri = "file://" + os.path.abspath(uri)
    return uri.rstrip("/") + "/" + rel
