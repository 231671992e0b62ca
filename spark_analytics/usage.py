"""Usage from ``__usage`` records, in Spark: the reading rules of brokers/server/usage.py, then hourly rollups.

* A record sent twice has one id: of the records sharing an id, only the first (lowest ``__usage``
  partition and offset) counts.
* Ingress is a set of offset ranges per topic-partition; a range contained in another was metered
  again by a later leader (its position commit was lost) and is dropped, as are exact repeats.
* Every figure is attributed to the hour of the record that reports it (``at_ms``, UTC).

Rows out: ``tenant_id, queue, metric, hour_ms`` (the hour's start, UTC) and ``value`` (a long), for the
metrics ``messages_in``, ``bytes_in``, ``messages_out``, ``bytes_out``, ``requests``,
``storage_byte_seconds``, ``partition_seconds`` (brokers) and ``gateway_requests``, ``gateway_bytes_in``,
``gateway_bytes_out`` (REST requests and WebSocket frames and their bytes, from the gateway). A topic
``t<id>.<name>`` belongs to tenant ``id`` and queue ``name`` (a dead-letter topic is the queue
``NAME.dlq``); requests have no queue (``""``). Records that do not decode are counted as the metric
``malformed_records`` (tenant ``None``), so a job can say how many it skipped.

How it is fast (a month of a busy cluster is tens of millions of figures): records are decoded in the
Python workers with msgspec and flattened column-wise; every figure but ingress is summed per topic,
metric and hour right there (pyarrow), so only ingress ranges, which need the whole partition's view
for the containment rule, reach Spark's one shuffle and sort. Duplicated ids are found first in a
cheap pass that decodes only the id.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

HOUR_MS = 3_600_000
METRICS = ("messages_in", "bytes_in", "messages_out", "bytes_out", "requests", "storage_byte_seconds",
           "partition_seconds", "gateway_requests", "gateway_bytes_in", "gateway_bytes_out")
MALFORMED = "malformed_records"
INGRESS = "ingress"
# What the flattening yields: ingress ranges as they are (metric "ingress", a = messages, b = bytes, at_ms the
# record's time) and every other figure already summed per (metric, topic, hour) (a = the sum, at_ms = the hour).
FLAT_SCHEMA = "metric string, topic string, partition int, start long, end long, at_ms long, a long, b long"
_FLAT_ARROW = pa.schema([("metric", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                         ("start", pa.int64()), ("end", pa.int64()), ("at_ms", pa.int64()), ("a", pa.int64()),
                         ("b", pa.int64())])


class _Id(msgspec.Struct):
    id: str


class _Record(msgspec.Struct):
    id: str
    at_ms: int
    ingress: list[tuple[str, int, int, int, int, int]] = []
    egress: list[tuple[str, int, int]] = []
    requests: list[tuple[str, int]] = []
    storage: list[tuple[str, int, float, float]] = []
    gateway: list[tuple[str, int, int, int]] = []


def _ids(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    decode = msgspec.json.Decoder(_Id).decode
    for batch in batches:
        ids = []
        for value in batch.column("value").to_pylist():
            try:
                ids.append(decode(value).id)
            except (msgspec.DecodeError, TypeError):
                ids.append(None)
        yield pa.RecordBatch.from_arrays([pa.array(ids, pa.string()), batch.column("partition"), batch.column("offset")],
                                         names=["id", "partition", "offset"])


def duplicated_ids(raw: DataFrame) -> dict[str, tuple[int, int]]:
    """Ids held by more than one record, each with where its first copy is: ``{id: (partition, offset)}``."""
    ids = raw.select("value", "partition", "offset").mapInArrow(_ids, "id string, partition int, offset long")
    repeated = (ids.where(F.col("id").isNotNull()).groupBy("id")
                .agg(F.count("*").alias("copies"), F.min(F.struct("partition", "offset")).alias("first"))
                .where(F.col("copies") > 1))
    return {row.id: (row.first.partition, row.first.offset) for row in repeated.collect()}


def _flattener(duplicates, from_ms: int, to_ms: int):
    """The mapInArrow function: __usage rows (value, partition, offset) -> FLAT_SCHEMA rows. ``duplicates`` is a
    broadcast of duplicated_ids()."""

    def flatten(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        decode = msgspec.json.Decoder(_Record).decode
        first_copy = duplicates.value
        for batch in batches:
            ingress = [[] for _ in range(7)]  # topic, partition, start, end, messages, bytes, at_ms
            sums = {name: ([], [], []) for name in ("egress", "requests", "storage", "gateway")}  # rows, topics, hours
            malformed = 0
            for value, partition, offset in zip(batch.column("value").to_pylist(), batch.column("partition").to_pylist(),
                                                batch.column("offset").to_pylist(), strict=True):
                try:
                    record = decode(value)
                except (msgspec.DecodeError, TypeError):
                    malformed += 1
                    continue
                first = first_copy.get(record.id)
                if first is not None and first != (partition, offset):
                    continue  # a copy of a record already counted
                if record.ingress:
                    for column, values in zip(ingress, zip(*record.ingress, strict=True), strict=False):
                        column.extend(values)
                    ingress[6].extend([record.at_ms] * len(record.ingress))
                if not from_ms <= record.at_ms < to_ms:
                    continue  # ingress of every record counts for the containment rule; the rest only in the period
                hour = record.at_ms // HOUR_MS * HOUR_MS
                for name in sums:
                    entries = getattr(record, name)
                    if entries:
                        rows, topics, hours = sums[name]
                        rows.extend(entries)
                        topics.extend(entry[0] for entry in entries)
                        hours.extend([hour] * len(entries))
            out = [_ingress_batch(ingress)] + [part for name in sums for part in _summed(name, *sums[name])]
            if malformed:
                out.append(_sum_rows(MALFORMED, pa.array([""]), pa.array([0], pa.int64()), pa.array([malformed], pa.int64())))
            for part in out:
                if part.num_rows:
                    yield part

    return flatten


def _ingress_batch(columns: list[list]) -> pa.RecordBatch:
    topic, partition, start, end, messages, size, at_ms = columns
    return pa.RecordBatch.from_arrays([
        pa.array([INGRESS] * len(topic), pa.string()), pa.array(topic, pa.string()), pa.array(partition, pa.int32()),
        pa.array(start, pa.int64()), pa.array(end, pa.int64()), pa.array(at_ms, pa.int64()),
        pa.array(messages, pa.int64()), pa.array(size, pa.int64())], schema=_FLAT_ARROW)


def _sum_rows(metric: str, topic: pa.Array, hour: pa.Array, value: pa.Array) -> pa.RecordBatch:
    n = len(topic)
    zeros = pa.array([0] * n, pa.int64())
    return pa.RecordBatch.from_arrays([
        pa.array([metric] * n, pa.string()), topic, pa.array([-1] * n, pa.int32()), zeros, zeros, hour, value, zeros],
        schema=_FLAT_ARROW)


def _round(values: tuple) -> pa.Array:
    """Half up to a whole number, as Spark's round() (the figures are never negative)."""
    return pc.cast(pc.floor(pc.add(pa.array(values, pa.float64()), 0.5)), pa.int64())


# Which figures of an entry are which metric: (entry position, metric) per list of a record.
_SUMMED = {
    "egress": ((1, "messages_out"), (2, "bytes_out")),
    "requests": ((1, "requests"),),
    "storage": ((2, "storage_byte_seconds"), (3, "partition_seconds")),
    "gateway": ((1, "gateway_requests"), (2, "gateway_bytes_in"), (3, "gateway_bytes_out")),
}


def _summed(name: str, rows: list[tuple], topics: list[str], hours: list[int]) -> list[pa.RecordBatch]:
    """Per (topic, hour) sums of one list's figures (a batch per metric)."""
    if not rows:
        return []
    columns = list(zip(*rows, strict=True))
    table = pa.table({"topic": pa.array(topics, pa.string()), "hour": pa.array(hours, pa.int64()),
                      **{metric: (_round(columns[i]) if name == "storage" else pa.array(columns[i], pa.int64()))
                         for i, metric in _SUMMED[name]}})
    grouped = table.group_by(["topic", "hour"]).aggregate([(metric, "sum") for _, metric in _SUMMED[name]])
    topic, hour = grouped.column("topic").combine_chunks(), grouped.column("hour").combine_chunks()
    return [_sum_rows(metric, topic, hour, grouped.column(f"{metric}_sum").combine_chunks())
            for _, metric in _SUMMED[name]]


def usage_rollup(raw: DataFrame, from_ms: int, to_ms: int) -> DataFrame:
    """Hourly sums per tenant, queue and metric of the figures reported in [from_ms, to_ms) (whole hours), from the
    rows of the ``tideway`` source reading ``__usage`` (columns ``value``, ``partition``, ``offset``). Reads
    ``raw`` twice (ids, then everything)."""
    if from_ms % HOUR_MS or to_ms % HOUR_MS:
        raise ValueError("usage is rolled up in whole hours: the bounds must be hour starts")
    spark = raw.sparkSession
    duplicates = spark.sparkContext.broadcast(duplicated_ids(raw))
    flat = raw.select("value", "partition", "offset").mapInArrow(_flattener(duplicates, from_ms, to_ms), FLAT_SCHEMA)
    # Contained in another range of its partition: some range starting no later ends no earlier. Ordered by start,
    # then longest first, that is the largest end among the ranges before it (exact repeats included). Summed rows
    # ride along in partitions of their own (partition -1) and are all kept.
    before = Window.partitionBy("metric", "topic", "partition").orderBy(F.col("start"), F.col("end").desc()) \
        .rowsBetween(Window.unboundedPreceding, -1)
    kept = flat.withColumn("reach", F.max("end").over(before)).where(
        (F.col("metric") != INGRESS) | F.col("reach").isNull() | (F.col("reach") < F.col("end")))
    in_period = kept.where((F.col("metric") != INGRESS) | ((F.col("at_ms") >= from_ms) & (F.col("at_ms") < to_ms)))
    hour = (F.col("at_ms") / HOUR_MS).cast("long") * HOUR_MS
    summed = in_period.groupBy("metric", "topic", hour.alias("hour_ms")).agg(F.sum("a").alias("a"), F.sum("b").alias("b"))
    # Ingress becomes two metrics; everything else is one already.
    named = summed.select(
        F.explode(F.when(F.col("metric") == INGRESS,
                         F.array(F.struct(F.lit("messages_in").alias("metric"), F.col("a").alias("value")),
                                 F.struct(F.lit("bytes_in").alias("metric"), F.col("b").alias("value"))))
                  .otherwise(F.array(F.struct(F.col("metric").alias("metric"), F.col("a").alias("value"))))).alias("m"),
        "topic", "hour_ms")
    return named.select(
        F.regexp_extract("topic", r"^t(\d+)\.", 1).try_cast("long").alias("tenant_id"),
        F.regexp_extract("topic", r"^t\d+\.(.*)$", 1).alias("queue"),
        F.col("m.metric").alias("metric"), "hour_ms", F.col("m.value").cast("long").alias("value"),
    ).where((F.col("tenant_id").isNotNull() & (F.col("value") != 0)) | (F.col("metric") == MALFORMED))
