"""The driver program of the standalone-cluster test (tests/spark/test_spark_cluster.py): a separate
process, since one Python process holds one SparkContext and the test session already has a
``local[2]`` one. The cluster itself is :class:`support.spark_cluster.StandaloneCluster`.

``python cluster.py MASTER_URL TABLE_PATH OUT_JSON`` creates and writes a Merge-on-Read table
through ``inlet.core.spark.write`` (insert, upsert), inserts more rows through the ``hudi`` data
source (``df.write.format("hudi")``), reads it back through ``spark.read.format("hudi")`` and
records what it saw.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


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
