"""A Spark session for Tideway's jobs, with the ``tideway`` data source registered.

``local[*]`` by default; any ``--master`` (``spark://host:7077``) runs the same jobs unchanged. The
workers run this interpreter (the venv's: they import ``brokers`` and ``pyarrow``), and a local session
stays on loopback with the UI off.
"""

from __future__ import annotations

import os
import sys


def spark_session(master: str = "local[*]", app: str = "tideway"):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app).config("spark.ui.enabled", "false")
    # In local mode the driver is the executor too: Spark's default heap (1 GiB) runs out on a month of usage.
    builder = builder.config("spark.driver.memory", os.environ.get("TIDEWAY_SPARK_DRIVER_MEMORY", "4g"))
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.sql.shuffle.partitions", "4"))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    from tideway_server.spark_analytics.source import TidewaySource

    session.dataSource.register(TidewaySource)
    return session
