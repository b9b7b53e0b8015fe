"""The Python daemon of Inlet's Spark sessions (``spark.python.daemon.module``): PySpark's own
daemon (:mod:`pyspark.daemon`), with the modules Inlet's Spark tasks run imported once, before it
forks the Python workers.

PySpark's daemon imports almost nothing and every worker it forks imports what its task needs:
for Inlet's tasks that is pyarrow, pandas (pyarrow imports it on first use), numpy, psycopg and
the core's writer, about 1.5-2 CPU-seconds per worker, paid again by every worker (a ``local[2]``
load forked ten) and about half of a 1M-row load's Python CPU. Imported here, the workers share
them from the fork. PySpark's note that a worker module should be imported after the fork is about
threads a module starts: importing these starts only pyarrow's allocator background threads, which
a forked child does without (its thread pools start on first use, in the worker). Workers forked
from this daemon run the Spark stack's end-to-end test (``tests/e2e/replication/test_initial_load.py``)
and ``benchmarks/initial_load.py``; the Spark unit tests' session uses PySpark's own daemon.
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
