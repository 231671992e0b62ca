"""Lag samples from ``__lag`` records, in Spark: rollups per group and partition, and the last window's samples.

A ``__lag`` record (platform/lag/store.py) holds many groups' samples; they are decoded with msgspec in the
Python workers into one row per group and partition, plus one per group (``partition`` -1: its lag summed,
its lag in seconds the largest). Rollups at a minute, an hour and a day: the number of samples, the max, the
mean and the 95th percentile (exact, interpolated between the closest ranks: numpy's "linear") of the lag in
messages and in seconds.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pyarrow as pa
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

MINUTE_MS, HOUR_MS, DAY_MS = 60_000, 3_600_000, 86_400_000
GRANULARITIES = {"minute": MINUTE_MS, "hour": HOUR_MS, "day": DAY_MS}
SAMPLE_COLUMNS = [("at_ms", pa.int64()), ("tenant_id", pa.int64()), ("queue", pa.string()), ("group", pa.string()),
                  ("kind", pa.string()), ("members", pa.int64()), ("partition", pa.int32()), ("position", pa.int64()),
                  ("log_end", pa.int64()), ("lag", pa.int64()), ("lag_ms", pa.int64()), ("in_flight", pa.int64())]
SAMPLE_SCHEMA = ", ".join(f"`{name}` {'int' if kind == pa.int32() else 'long' if kind == pa.int64() else 'string'}"
                          for name, kind in SAMPLE_COLUMNS)
_ARROW = pa.schema(SAMPLE_COLUMNS)


class _Record(msgspec.Struct):
    at_ms: int
    # [tenant id, queue, group, kind, members, in flight, dead letters, partitions]
    groups: list[tuple[int, str, str, str, int, int | None, int | None, list[list[float]]]] = []


def _flatten(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    decode = msgspec.json.Decoder(_Record).decode
    for batch in batches:
        columns: list[list] = [[] for _ in SAMPLE_COLUMNS]
        for value in batch.column("value").to_pylist():
            try:
                record = decode(value)
            except (msgspec.DecodeError, TypeError):
                continue  # not a lag record: nothing to roll up
            at = record.at_ms
            for tenant_id, queue, group, kind, members, _in_flight, _dead, partitions in record.groups:
                total_lag, worst_ms, total_in_flight = 0, 0, 0
                for row in partitions:
                    number, position, end, lag, lag_ms, in_flight = (int(x) for x in row[:6])
                    for column, item in zip(columns, (at, tenant_id, queue, group, kind, members, number, position, end,
                                                      lag, lag_ms, in_flight), strict=True):
                        column.append(item)
                    total_lag += lag
                    worst_ms = max(worst_ms, lag_ms)
                    total_in_flight += in_flight
                for column, item in zip(columns, (at, tenant_id, queue, group, kind, members, -1, None, None, total_lag,
                                                  worst_ms, total_in_flight), strict=True):
                    column.append(item)
        yield pa.RecordBatch.from_arrays([pa.array(c, t) for c, (_n, t) in zip(columns, SAMPLE_COLUMNS, strict=True)],
                                         schema=_ARROW)


def lag_samples(raw: DataFrame) -> DataFrame:
    """One row per sample of a group's partition (and of the whole group, partition -1), from the rows of the
    ``tideway`` source reading ``__lag``."""
    return raw.select("value").mapInArrow(_flatten, SAMPLE_SCHEMA)


def rollups(samples: DataFrame, granularity: str, from_ms: int, to_ms: int | None = None) -> DataFrame:
    """Per group, partition and ``granularity`` slot starting in [from_ms, to_ms): samples, max, mean, p95."""
    size = GRANULARITIES[granularity]
    start = (F.floor(F.col("at_ms") / size) * size).cast("long")
    window = F.col("start_ms") >= from_ms
    if to_ms is not None:
        window = window & (F.col("start_ms") < to_ms)
    return (samples.withColumn("start_ms", start).where(window)
            .groupBy("tenant_id", "queue", "kind", "group", "partition", "start_ms")
            .agg(F.count("*").alias("samples"),
                 F.max("lag").alias("lag_max"), F.avg("lag").alias("lag_mean"), F.percentile("lag", 0.95).alias("lag_p95"),
                 F.max("lag_ms").alias("lag_ms_max"), F.avg("lag_ms").alias("lag_ms_mean"),
                 F.percentile("lag_ms", 0.95).alias("lag_ms_p95")))


def last_window(samples: DataFrame, count: int) -> DataFrame:
    """The newest ``count`` samples of every group's partition (for statuses and time-to-drain)."""
    newest = Window.partitionBy("tenant_id", "queue", "kind", "group", "partition").orderBy(F.col("at_ms").desc())
    return samples.where(F.col("partition") >= 0).withColumn("n", F.row_number().over(newest)).where(F.col("n") <= count).drop("n")
