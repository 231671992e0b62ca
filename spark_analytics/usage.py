"""Usage from ``__usage`` records, in Spark: the reading rules of brokers/server/usage.py, then hourly rollups.

* A record sent twice has one id: records are deduplicated by id.
* Ingress is a set of offset ranges per topic-partition; a range contained in another was metered
  again by a later leader (its position commit was lost) and is dropped, as are exact repeats.
* Every figure is attributed to the hour of the record that reports it (``at_ms``, UTC).

Rows out: ``tenant_id, queue, metric, hour`` (the hour's start, UTC) and ``value`` (a long), for the
metrics ``messages_in``, ``bytes_in``, ``messages_out``, ``bytes_out``, ``requests``,
``storage_byte_seconds``, ``partition_seconds`` (brokers) and ``gateway_requests``, ``gateway_bytes_in``,
``gateway_bytes_out`` (REST requests and WebSocket frames and their bytes, from the gateway). A topic ``t<id>.<name>`` belongs to tenant ``id``
and queue ``name`` (a dead-letter topic is the queue ``NAME.dlq``); requests have no queue (``""``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

RECORD_SCHEMA = ("id string, source string, at_ms long, ingress array<array<string>>, "
                 "egress array<array<string>>, requests array<array<string>>, storage array<array<string>>, "
                 "gateway array<array<string>>")
METRICS = ("messages_in", "bytes_in", "messages_out", "bytes_out", "requests", "storage_byte_seconds",
           "partition_seconds", "gateway_requests", "gateway_bytes_in", "gateway_bytes_out")


def usage_records(raw: DataFrame) -> DataFrame:
    """Decoded, deduplicated records from the rows of the ``tideway`` source reading ``__usage``."""
    parsed = raw.select(F.from_json(F.col("value").cast("string"), RECORD_SCHEMA).alias("r")).select("r.*")
    return parsed.where(F.col("id").isNotNull()).dropDuplicates(["id"])


def _tenant_and_queue(topic):
    return (F.regexp_extract(topic, r"^t(\d+)\.", 1).cast("long").alias("tenant_id"),
            F.regexp_extract(topic, r"^t\d+\.(.*)$", 1).alias("queue"))


def usage_rows(records: DataFrame) -> DataFrame:
    """(tenant_id, queue, metric, at_ms, value) rows, before rollup."""
    at = F.col("at_ms")
    ingress = (records.select(at, F.explode("ingress").alias("i"))
               .select(at, F.col("i")[0].alias("topic"), F.col("i")[1].cast("int").alias("partition"),
                       F.col("i")[2].cast("long").alias("start"), F.col("i")[3].cast("long").alias("end"),
                       F.col("i")[4].cast("long").alias("messages"), F.col("i")[5].cast("long").alias("bytes")))
    ingress = ingress.dropDuplicates(["topic", "partition", "start", "end"])
    # Contained in another range of its partition: some range starting no later ends no earlier. Ordered by start,
    # then longest first, that is the largest end among the ranges before it (one sort, no self-join).
    before = Window.partitionBy("topic", "partition").orderBy(F.col("start"), F.col("end").desc()) \
        .rowsBetween(Window.unboundedPreceding, -1)
    kept = ingress.withColumn("reach", F.max("end").over(before)) \
        .where(F.col("reach").isNull() | (F.col("reach") < F.col("end")))
    rows_in = kept.select(*_tenant_and_queue(F.col("topic")), at, F.col("messages"), F.col("bytes"))
    rows_in = (rows_in.select("tenant_id", "queue", "at_ms", F.lit("messages_in").alias("metric"), F.col("messages").alias("value"))
               .unionByName(rows_in.select("tenant_id", "queue", "at_ms", F.lit("bytes_in").alias("metric"),
                                           F.col("bytes").alias("value"))))

    egress = records.select(at, F.explode("egress").alias("e")).select(
        at, F.col("e")[0].alias("topic"), F.col("e")[1].cast("long").alias("messages"), F.col("e")[2].cast("long").alias("bytes"))
    egress = egress.select(*_tenant_and_queue(F.col("topic")), at, "messages", "bytes")
    rows_out = (egress.select("tenant_id", "queue", "at_ms", F.lit("messages_out").alias("metric"), F.col("messages").alias("value"))
                .unionByName(egress.select("tenant_id", "queue", "at_ms", F.lit("bytes_out").alias("metric"),
                                           F.col("bytes").alias("value"))))

    requests = records.select(at, F.explode("requests").alias("q")).select(
        F.regexp_extract(F.col("q")[0], r"^t(\d+)\.", 1).cast("long").alias("tenant_id"), F.lit("").alias("queue"), at,
        F.lit("requests").alias("metric"), F.col("q")[1].cast("long").alias("value"))

    storage = records.select(at, F.explode("storage").alias("s")).select(
        at, F.col("s")[0].alias("topic"), F.col("s")[2].cast("double").alias("byte_seconds"),
        F.col("s")[3].cast("double").alias("partition_seconds"))
    storage = storage.select(*_tenant_and_queue(F.col("topic")), at, "byte_seconds", "partition_seconds")
    rows_storage = (storage.select("tenant_id", "queue", "at_ms", F.lit("storage_byte_seconds").alias("metric"),
                                   F.round("byte_seconds").cast("long").alias("value"))
                    .unionByName(storage.select("tenant_id", "queue", "at_ms", F.lit("partition_seconds").alias("metric"),
                                                F.round("partition_seconds").cast("long").alias("value"))))
    gateway = records.select(at, F.explode_outer("gateway").alias("g")).where(F.col("g").isNotNull()).select(
        at, F.col("g")[0].alias("topic"), F.col("g")[1].cast("long").alias("requests"),
        F.col("g")[2].cast("long").alias("bytes_in"), F.col("g")[3].cast("long").alias("bytes_out"))
    gateway = gateway.select(*_tenant_and_queue(F.col("topic")), at, "requests", "bytes_in", "bytes_out")
    rows_gateway = None
    for column in ("requests", "bytes_in", "bytes_out"):
        part = gateway.select("tenant_id", "queue", "at_ms", F.lit(f"gateway_{column}").alias("metric"),
                              F.col(column).alias("value"))
        rows_gateway = part if rows_gateway is None else rows_gateway.unionByName(part)
    return (rows_in.unionByName(rows_out).unionByName(requests).unionByName(rows_storage).unionByName(rows_gateway)
            .where(F.col("tenant_id").isNotNull()))


def hourly(rows: DataFrame, from_ms: int, to_ms: int) -> DataFrame:
    """Sums per tenant, queue, metric and hour, for records reported in [from_ms, to_ms)."""
    period = rows.where((F.col("at_ms") >= from_ms) & (F.col("at_ms") < to_ms))
    hour_ms = (F.col("at_ms") / 3_600_000).cast("long") * 3_600_000
    return (period.withColumn("hour_ms", hour_ms).groupBy("tenant_id", "queue", "metric", "hour_ms")
            .agg(F.sum("value").cast("long").alias("value")).where(F.col("value") != 0))
