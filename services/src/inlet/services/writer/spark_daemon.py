"""The Python daemon of Inlet's Spark sessions (``spark.python.daemon.module``): PySpark's own
daemon (:mod:`pyspark.daemon`), with the modules Inlet's Spark tasks run imported once, before it
forks the Python workers.

PySpark's daemon imports almost nothing and every worker it forks imports what its task needs:
for Inlet's tasks that is pyarrow, pandas (pyarrow imports it on first use), numpy, psycopg and
the core's writer, about 1.5-2 CPU-seconds per worker, paid again by every worker (a ``local[2]``
load forked ten) and about half of a 1M-row load's Python CPU. Imported here, the workers share
them from the fork. PySpark's note that a worker module should be imported after the fork is about
threads a module starts: these start none that a forked child needs (pyarrow's allocator thread is
jemalloc's, which handles ``fork``; its thread pools start on first use), and the load's and the
writer's Spark tests run with this daemon.
"""

from __future__ import annotations


def _preload() -> None:
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401
    import pyspark.worker  # noqa: F401

    import inlet.core.spark.executors
    import inlet.services.writer.spark_load  # noqa: F401


if __name__ == "__main__":
    _preload()
    from pyspark.daemon import manager

    manager()
