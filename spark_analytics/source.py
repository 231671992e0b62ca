"""Tideway topics as a Spark data source (the Python Data Source API), registered as ``tideway``.

    spark.dataSource.register(TidewaySource)
    df = (spark.read.format("tideway")
          .option("bootstrap", "127.0.0.1:9401").option("apiKey", key)
          .option("subscribe", "t2.orders,__usage")
          .option("startingOffsets", "earliest").option("endingOffsets", '{"__usage": {"0": 500, "1": -1}}')
          .load())

Rows: ``key`` and ``value`` (binary), ``topic``, ``partition``, ``offset``, ``timestamp`` (UTC) and
``headers`` (an array of (key, value)), as Spark's Kafka source gives them. Options, as in Spark's Kafka
source where one exists:

* ``bootstrap`` (required): brokers, ``host:port,...``; ``apiKey``: the key to authenticate with (a
  service key reads any topic by its broker-side name; a tenant key its own topics by their own names);
* ``subscribe`` (required): comma-separated topics;
* ``startingOffsets``: ``earliest`` (default for batches), ``latest`` (default for streams) or JSON
  ``{"topic": {"0": 23, "1": -2}}`` with -2 for earliest and -1 for latest; ``startingTimestamp`` (ms):
  the first record at or after that time in every partition instead;
* ``endingOffsets`` (batches): ``latest`` (default) or JSON as above (-1 = latest);
* ``minPartitions``: split offset ranges so there are at least this many Spark partitions;
* ``maxOffsetsPerTrigger`` (streams): at most this many records per micro-batch, shared out across
  partitions in proportion to what each has waiting.

One input partition is one topic-partition offset range [start, end); a range is read whole, from the
partition's leader, in batches of records converted to Arrow record batches. Offsets past the log's end
are an error (named, with the partition's real end), as are unknown topics; ranges that retention has
already deleted start at the log's first offset.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "headers array<struct<key: string, value: binary>>")
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])
EARLIEST, LATEST = -2, -1
FETCH_BYTES = 4 << 20
ROWS_PER_BATCH = 10_000


class OptionError(ValueError):
    """An option the source cannot use (the message names it and says what it takes)."""


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    topic: str
    partition: int
    start: int
    end: int  # exclusive


# -- talking to the brokers (driver and executors) ------------------------------------------------


def _client(options: dict):
    from tideway.native import TidewayClient
    from tideway.native.credentials import ApiKey

    bootstrap = options.get("bootstrap")  # option names are case-insensitive in Spark: kept lower-case here
    if not bootstrap:
        raise OptionError('option "bootstrap" is required: the brokers, host:port,...')
    key = options.get("apikey")
    return TidewayClient(bootstrap, credentials=ApiKey(key) if key else None, request_timeout_ms=30_000)


async def _partition_counts(client, topics: list[str]) -> dict[str, int]:
    counts = {}
    for topic in topics:
        infos = await client.partitions_for(topic)
        if not infos:
            raise OptionError(f"topic {topic!r} does not exist (or this key may not see it)")
        counts[topic] = len(infos)
    return counts


async def _offsets(client, counts: dict[str, int], where: int) -> dict[str, dict[str, int]]:
    """Every partition's earliest (-2), latest (-1) offset, or the first at or after a time (ms)."""
    from tideway.protocol.messages import LATEST_TIMESTAMP

    out: dict[str, dict[str, int]] = {}
    for topic, count in counts.items():
        out[topic] = {}
        for partition in range(count):
            offset, _ = await client.list_offset(topic, partition, where)
            if offset < 0:  # a time after the last record: the end
                offset, _ = await client.list_offset(topic, partition, LATEST_TIMESTAMP)
            out[topic][str(partition)] = offset
    return out


def _bounds(options: dict, counts: dict[str, int], name: str, default: str, client, loop) -> dict[str, dict[str, int]]:
    """The offsets option ``name`` asks for, resolved to numbers (earliest, latest and times asked of the brokers)."""
    earliest = loop.run_until_complete(_offsets(client, counts, EARLIEST))
    latest = loop.run_until_complete(_offsets(client, counts, LATEST))
    if name == "startingOffsets" and options.get("startingtimestamp"):
        try:
            stamp = int(options["startingtimestamp"])
        except ValueError:
            raise OptionError('"startingTimestamp" is milliseconds since the epoch') from None
        return loop.run_until_complete(_offsets(client, counts, stamp))
    value = options.get(name.lower(), default)
    if value == "earliest":
        return earliest
    if value == "latest":
        return latest
    try:
        asked = json.loads(value)
        assert isinstance(asked, dict)
    except (ValueError, AssertionError):
        raise OptionError(f'"{name}" is "earliest", "latest" or JSON like {{"topic": {{"0": 23, "1": -2}}}}') from None
    out = {topic: dict(latest[topic]) for topic in counts}
    if name == "startingOffsets":
        out = {topic: dict(earliest[topic]) for topic in counts}
    for topic, partitions in asked.items():
        if topic not in counts:
            raise OptionError(f'"{name}" names topic {topic!r}, which is not subscribed')
        for partition, offset in partitions.items():
            if not str(partition).isdigit() or int(partition) >= counts[topic]:
                raise OptionError(f'"{name}": {topic!r} has no partition {partition} (it has {counts[topic]})')
            offset = int(offset)
            if offset == EARLIEST:
                offset = earliest[topic][str(partition)]
            elif offset == LATEST:
                offset = latest[topic][str(partition)]
            elif offset > latest[topic][str(partition)]:
                raise OptionError(f'"{name}": offset {offset} of {topic}-{partition} is past its end '
                                  f'({latest[topic][str(partition)]})')
            out[topic][str(int(partition))] = max(offset, earliest[topic][str(partition)])
    return out


def _plan(start: dict, end: dict, min_partitions: int) -> list[OffsetRange]:
    """Ranges [start, end) per topic-partition; the largest split until there are ``min_partitions``."""
    ranges = [OffsetRange(topic, int(p), start[topic][p], end[topic][p])
              for topic in sorted(end) for p in sorted(end[topic], key=int) if end[topic][p] > start[topic].get(p, 0)]
    total = sum(r.end - r.start for r in ranges)
    if min_partitions <= len(ranges) or total == 0:
        return ranges
    out = []
    for r in ranges:  # each range gets pieces in proportion to its size (at least one)
        pieces = max(1, min(r.end - r.start, round(min_partitions * (r.end - r.start) / total)))
        step, extra = divmod(r.end - r.start, pieces)
        at = r.start
        for i in range(pieces):
            size = step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, at, at + size))
            at += size
    return out


def read_range(options: dict, part: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of one range as Arrow batches (on an executor)."""
    from tideway.record.batch import decode_records, iter_batches, read_header
    from tideway.record.markers import AbortedFilter

    loop = asyncio.new_event_loop()
    client = _client(options)
    try:
        loop.run_until_complete(client.start())
        rows = _Rows()
        position = part.start
        while position < part.end:
            result = loop.run_until_complete(client.fetch(part.topic, part.partition, position, max_bytes=FETCH_BYTES))
            if not result.records:
                raise RuntimeError(f"{part.topic}-{part.partition}: offsets up to {part.end} were asked for; "
                                   f"the log has nothing from {position} (high watermark {result.high_watermark})")
            keep = AbortedFilter(result.aborted_transactions)  # committed records only; never a marker
            for batch_position, _base, _size in iter_batches(result.records):
                if keep.delivers(read_header(result.records, batch_position)):
                    for record in decode_records(result.records, batch_position):
                        if position <= record.offset < part.end:
                            rows.add(part, record)
                # Past this batch, whatever its last records were (compaction leaves gaps in the offsets).
                position = max(position, read_header(result.records, batch_position).next_offset)
                if position >= part.end:
                    break
            if len(rows) >= ROWS_PER_BATCH:
                yield rows.batch()
        if len(rows):
            yield rows.batch()
    finally:
        loop.run_until_complete(client.close())
        loop.close()


class _Rows:
    """Columns being filled, turned into an Arrow record batch."""

    def __init__(self) -> None:
        self.columns: dict[str, list] = {name: [] for name in ARROW_SCHEMA.names}

    def __len__(self) -> int:
        return len(self.columns["offset"])

    def add(self, part: OffsetRange, record) -> None:
        c = self.columns
        c["key"].append(record.key)
        c["value"].append(record.value)
        c["topic"].append(part.topic)
        c["partition"].append(part.partition)
        c["offset"].append(record.offset)
        c["timestamp"].append(record.timestamp_ms * 1000)
        c["headers"].append([{"key": k, "value": v} for k, v in record.headers])

    def batch(self) -> pa.RecordBatch:
        out = pa.RecordBatch.from_pydict(self.columns, schema=ARROW_SCHEMA)
        self.columns = {name: [] for name in ARROW_SCHEMA.names}
        return out


# -- Spark's side ------------------------------------------------------------------------------------


class TidewaySource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "tideway"

    def schema(self) -> str:
        return SCHEMA

    def _options(self) -> dict:
        return {name.lower(): value for name, value in self.options.items()}

    def _topics(self) -> list[str]:
        topics = [t.strip() for t in self.options.get("subscribe", "").split(",") if t.strip()]
        if not topics:
            raise OptionError('option "subscribe" is required: the topics to read, comma-separated')
        return topics

    def reader(self, schema) -> TidewayBatchReader:
        return TidewayBatchReader(self._options(), self._topics())

    def streamReader(self, schema) -> TidewayStreamReader:
        return TidewayStreamReader(self._options(), self._topics())


def _int_option(options: dict, name: str, default: int) -> int:
    try:
        value = int(options.get(name.lower(), default))
    except ValueError:
        raise OptionError(f'"{name}" is a whole number') from None
    if value < 1:
        raise OptionError(f'"{name}" must be at least 1')
    return value


class TidewayBatchReader(DataSourceReader):
    def __init__(self, options: dict, topics: list[str]) -> None:
        self.options = options
        loop = asyncio.new_event_loop()
        client = _client(options)
        try:
            loop.run_until_complete(client.start())
            counts = loop.run_until_complete(_partition_counts(client, topics))
            self.start = _bounds(options, counts, "startingOffsets", "earliest", client, loop)
            self.end = _bounds(options, counts, "endingOffsets", "latest", client, loop)
        finally:
            loop.run_until_complete(client.close())
            loop.close()
        self.min_partitions = _int_option(options, "minPartitions", 1)

    def partitions(self) -> list[OffsetRange]:
        return _plan(self.start, self.end, self.min_partitions)

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, partition)


class TidewayStreamReader(DataSourceStreamReader):
    """Micro-batches of whatever was appended since the last; offsets are {"topic": {"partition": next offset}}."""

    def __init__(self, options: dict, topics: list[str]) -> None:
        self.options = options
        self.topics = topics
        self.max_per_trigger = _int_option(options, "maxOffsetsPerTrigger", 1) if "maxoffsetspertrigger" in options else None
        self.min_partitions = _int_option(options, "minPartitions", 1)

    def _ask(self, what):
        loop = asyncio.new_event_loop()
        client = _client(self.options)
        try:
            loop.run_until_complete(client.start())
            counts = loop.run_until_complete(_partition_counts(client, self.topics))
            return what(client, counts, loop)
        finally:
            loop.run_until_complete(client.close())
            loop.close()

    def initialOffset(self) -> dict:
        return self._ask(lambda client, counts, loop: _bounds(self.options, counts, "startingOffsets", "latest", client, loop))

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        latest = self._ask(lambda client, counts, loop: loop.run_until_complete(_offsets(client, counts, LATEST)))
        for topic in latest:  # partitions added since the start begin at their first offset (0)
            start.setdefault(topic, {})
            for p in latest[topic]:
                start[topic].setdefault(p, 0)
        if not isinstance(limit, ReadMaxRows):
            return latest
        return share_out(start, latest, limit.max_rows)

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        return _plan(start, end, self.min_partitions)

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, partition)

    def commit(self, end: dict) -> None:
        pass  # Spark keeps the offsets in its checkpoint; nothing is committed to the brokers


def share_out(start: dict, latest: dict, budget: int) -> dict:
    """``latest``, cut so that at most ``budget`` records lie between ``start`` and it, each partition getting a
    share in proportion to what it has waiting (Spark's Kafka source does the same)."""
    waiting = {(t, p): latest[t][p] - start[t][p] for t in latest for p in latest[t] if latest[t][p] > start[t][p]}
    total = sum(waiting.values())
    out = {t: dict(start[t]) for t in latest}
    if total <= budget:
        return {t: dict(latest[t]) for t in latest}
    given = 0
    for (t, p), count in sorted(waiting.items()):
        share = min(count, budget * count // total)
        out[t][p] = start[t][p] + share
        given += share
    for t, p in sorted(waiting):  # what the rounding left, in order
        extra = min(budget - given, latest[t][p] - out[t][p])
        out[t][p] += extra
        given += extra
    return out
