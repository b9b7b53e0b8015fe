"""Apache Hudi on Spark 3.5 as a long-lived server: run by the oracle venv's python, never by Inlet's.

``python oracle_server.py --jars JAR[,JAR] --work DIR [--conf KEY=VALUE ...]`` starts one local Spark
session with Apache Hudi's bundle, then answers requests, one JSON object per line on stdin, one JSON
answer per line on stdout (the JVM's own output goes to stderr)::

    {"op": "read", "path": P, "options": {...}, "columns": [...] | null}  -> {"ok": true, "files": [F]}
    {"op": "reads", "reads": [{"path": ..., "options": ..., "columns": ...}, ...]} -> {"ok": true, "files": [F, ...]}
    {"op": "sql", "text": "SELECT ..."}                                    -> {"ok": true, "files": [F]}
    {"op": "write", "path": P, "data": IPC, "options": {...}, "mode": "append"} -> {"ok": true}
    {"op": "stop"}                                                         -> {"ok": true}, then exit

Results are Arrow IPC files under ``--work`` (the caller reads and deletes them). A failure answers
``{"ok": false, "error": "<Spark's error text>", "trace": "..."}`` and the server goes on serving.
The first line it prints is ``{"ok": true, "ready": {"spark": VERSION, "hudi_jar": NAME}}`` (the jar
Apache Hudi's data source was loaded from).

This file imports nothing of Inlet's: it is Apache Hudi's side of the comparison.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import traceback
from typing import Any

# The protocol owns the original stdout; everything else printed (Python or the JVM, which inherits
# file descriptor 1) goes to stderr.
_PROTOCOL = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

_names = itertools.count()


def _session(jars: str, work: str, confs: list[str]) -> SparkSession:
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("apache-hudi-oracle")
        .config("spark.jars", jars)
        .config("spark.driver.memory", "768m")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        .config("spark.kryo.registrator", "org.apache.spark.HoodieSparkKryoRegistrar")
        .config("spark.sql.extensions", "org.apache.spark.sql.hudi.HoodieSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.hudi.catalog.HoodieCatalog")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", os.path.join(work, "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={os.path.join(work, 'derby')}")
    )
    for conf in confs:
        key, _, value = conf.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _to_file(df: DataFrame, work: str) -> str:
    schema = to_arrow_schema(df.schema)
    batches = df._collect_as_arrow()
    table = pa.Table.from_batches(batches) if batches else schema.empty_table()
    path = os.path.join(work, f"result-{next(_names)}.arrow")
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return path


def _read(spark: SparkSession, work: str, request: dict[str, Any]) -> str:
    reader = spark.read.format("hudi")
    for key, value in (request.get("options") or {}).items():
        reader = reader.option(key, str(value))
    df = reader.load(request["path"])
    if request.get("columns"):
        df = df.select(*request["columns"])
    return _to_file(df, work)


def _write(spark: SparkSession, work: str, request: dict[str, Any]) -> None:
    # Arrow IPC -> Parquet -> Spark keeps every Arrow type as Spark reads Parquet (no pandas detour)
    with pa.memory_map(request["data"]) as source:
        table = pa.ipc.open_file(source).read_all()
    staged = os.path.join(work, f"write-{next(_names)}.parquet")
    pq.write_table(table, staged)
    try:
        df = spark.read.parquet(staged)
        writer = df.write.format("hudi")
        for key, value in (request.get("options") or {}).items():
            writer = writer.option(key, str(value))
        writer.mode(request.get("mode", "append")).save(request["path"])
    finally:
        os.unlink(staged)


def _error_text(exc: BaseException) -> str:
    java = getattr(exc, "java_exception", None)
    if java is not None:  # py4j's Py4JJavaError: the JVM exception and its causes
        parts, cause = [], java
        while cause is not None and len(parts) < 6:
            parts.append(str(cause.toString()))
            cause = cause.getCause()
        return "\n  caused by: ".join(parts)
    desc = getattr(exc, "desc", None)  # pyspark's CapturedException (AnalysisException, ...)
    return f"{type(exc).__name__}: {desc or exc}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jars", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--conf", action="append", default=[])
    args = parser.parse_args()
    spark = _session(args.jars, args.work, args.conf)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    # the jar Apache Hudi's data source was loaded from: its Maven file name carries the version
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()  # spark.jars' loader
    source = loader.loadClass("org.apache.hudi.DefaultSource")
    jar = os.path.basename(str(source.getProtectionDomain().getCodeSource().getLocation().getPath()))
    _answer({"ok": True, "ready": {"spark": spark.version, "hudi_jar": jar}})
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request.get("op")
        try:
            if op == "read":
                _answer({"ok": True, "files": [_read(spark, args.work, request)]})
            elif op == "reads":
                _answer({"ok": True, "files": [_read(spark, args.work, r) for r in request["reads"]]})
            elif op == "sql":
                _answer({"ok": True, "files": [_to_file(spark.sql(request["text"]), args.work)]})
            elif op == "write":
                _write(spark, args.work, request)
                _answer({"ok": True})
            elif op == "stop":
                break
            else:
                _answer({"ok": False, "error": f"unknown op {op!r}", "trace": ""})
        except Exception as exc:  # every failure is an answer; the server keeps serving
            _answer({"ok": False, "error": _error_text(exc), "trace": traceback.format_exc()})
    spark.stop()
    _answer({"ok": True})


def _answer(message: dict[str, Any]) -> None:
    _PROTOCOL.write(json.dumps(message) + "\n")
    _PROTOCOL.flush()


if __name__ == "__main__":
    main()
