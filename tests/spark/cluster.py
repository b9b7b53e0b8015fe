"""A real Spark standalone cluster from the installed PySpark: one master and one worker, each a
``java`` process started through ``pyspark/bin/spark-class``, bound to 127.0.0.1 on free ports.

>>> with StandaloneCluster(tmp_dir) as cluster:
...     cluster.master_url   # spark://127.0.0.1:<port>

``SPARK_LOCAL_IP=127.0.0.1`` makes every server of both processes (RPC, web UIs) bind loopback;
the web UIs get free ports, the master's REST submission server is off. Both processes are
stopped (SIGTERM, then SIGKILL) on exit, with the executors the worker started (the worker's
process group).

Run as a script, it is the driver program of the cluster test (a separate process, since one
Python process holds one SparkContext and the test session already has a ``local[2]`` one):
``python cluster.py MASTER_URL TABLE_PATH OUT_JSON`` creates and writes a Merge-on-Read table
through ``inlet.core.spark.write`` (insert, upsert), inserts more rows through the ``hudi`` data
source (``df.write.format("hudi")``), reads it back through ``spark.read.format("hudi")`` and
records what it saw.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.3)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s:\n{log.read_text()[-3000:]}")


class StandaloneCluster:
    def __init__(self, work_dir: Path, cores: int = 2, memory: str = "1g") -> None:
        self.work_dir = work_dir
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(SPARK_HOME),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOCAL_DIRS=str(self.work_dir / "local"),
            SPARK_WORKER_DIR=str(self.work_dir / "worker"),
            SPARK_LOG_DIR=str(self.work_dir / "logs"),
            PYSPARK_PYTHON=sys.executable,
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
            SPARK_DAEMON_MEMORY="512m",
        )
        return env

    def _start(self, name: str, args: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.work_dir / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                env=self._env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: the executors it starts go with it
            )
        self.procs.append(proc)
        return proc, log

    def start(self) -> StandaloneCluster:
        for d in ("local", "worker", "logs"):
            (self.work_dir / d).mkdir(parents=True, exist_ok=True)
        master, log = self._start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(free_port()),
            ],
        )
        _wait_port(self.port, master, log)
        worker_port = free_port()
        worker, wlog = self._start(
            "worker",
            [
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--port",
                str(worker_port),
                "--webui-port",
                str(free_port()),
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--work-dir",
                str(self.work_dir / "worker"),
                self.master_url,
            ],
        )
        _wait_port(worker_port, worker, wlog)
        deadline = time.monotonic() + 60
        while "Successfully registered with master" not in wlog.read_text():
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(f"the worker did not register:\n{wlog.read_text()[-3000:]}")
            time.sleep(0.3)
        return self

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # executors left in the group, if any
        self.procs.clear()

    def __enter__(self) -> StandaloneCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


# ---------------------------------------------------------------------- the driver program


def drive(master_url: str, table_path: str, out: str) -> None:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master_url)
        .appName("inlet-cluster-test")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "2")
        .config("spark.cores.max", "2")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    try:
        from inlet.core.spark.datasource import register

        register(spark)
        rows = [(i, ["sf", "nyc", "la"][i % 3], 1, float(i)) for i in range(300)]
        df = spark.createDataFrame(rows, "id long, city string, ts long, fare double").repartition(4)
        options = {
            "hoodie.table.name": "trips",
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.partitionpath.field": "city",
            "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.datasource.write.table.type": "MERGE_ON_READ",
        }
        from inlet.core.spark import write

        write(df, table_path, {**options, "hoodie.datasource.write.operation": "insert"})
        changes = spark.createDataFrame(
            [(i, ["sf", "nyc", "la"][i % 3], 2, float(i) * 10) for i in range(0, 300, 7)],
            "id long, city string, ts long, fare double",
        )
        write(changes, table_path, {**options, "hoodie.datasource.write.operation": "upsert"})
        more = spark.createDataFrame(
            [(1000 + i, ["sf", "nyc", "la"][i % 3], 3, -1.0) for i in range(30)],
            "id long, city string, ts long, fare double",
        ).repartition(3)
        more.write.format("hudi").option("hoodie.datasource.write.operation", "insert").option(
            "hoodie.combine.before.insert", "false"
        ).mode("append").save(table_path)
        read = spark.read.format("hudi").load(table_path)
        result = {
            "master": spark.sparkContext.master,
            "input_partitions": read.rdd.getNumPartitions(),
            "rows": [
                r.asDict() for r in read.select("id", "city", "ts", "fare", "_hoodie_record_key").collect()
            ],
            "sf_rows": read.where("city = 'sf'").count(),
        }
        Path(out).write_text(json.dumps(result))
    finally:
        spark.stop()


if __name__ == "__main__":
    drive(sys.argv[1], sys.argv[2], sys.argv[3])
