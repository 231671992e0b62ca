"""The ``tideway`` Spark data source against a real broker: batch and streaming reads return exactly the
requested offset ranges of a topic with known contents (PySpark in local mode, Java required)."""

from __future__ import annotations

import asyncio
import json

import pytest

from tideway.native import Producer, TidewayClient

pytestmark = pytest.mark.timeout(300)
PARTITIONS, PER_PARTITION = 3, 30


@pytest.fixture
def known(broker):
    """A 3-partition topic with 30 records in each: key k-P-I, value v-P-I, a header naming the partition."""

    async def fill() -> None:
        async with TidewayClient(broker.bootstrap) as client:
            await client.create_topic("known", partitions=PARTITIONS)
            async with Producer(client, acks="all") as producer:
                for i in range(PER_PARTITION):
                    for p in range(PARTITIONS):
                        await producer.send("known", b"v-%d-%d" % (p, i), key=b"k-%d-%d" % (p, i), partition=p,
                                            headers=[("from", b"p%d" % p)])

    asyncio.run(fill())
    return broker


def _read(spark, bootstrap: str, **options):
    reader = spark.read.format("tideway").option("bootstrap", bootstrap).option("subscribe", "known")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _triples(frame) -> list[tuple[int, int, bytes]]:
    return sorted((r.partition, r.offset, bytes(r.value)) for r in frame.select("partition", "offset", "value").collect())


def test_a_batch_read_returns_every_record_with_its_columns(spark, known):
    frame = _read(spark, known.bootstrap)
    assert [f.name for f in frame.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp", "headers"]
    rows = frame.collect()
    assert len(rows) == PARTITIONS * PER_PARTITION
    assert _triples(frame) == [(p, i, b"v-%d-%d" % (p, i)) for p in range(PARTITIONS) for i in range(PER_PARTITION)]
    one = next(r for r in rows if r.partition == 1 and r.offset == 7)
    assert bytes(one.key) == b"k-1-7" and one.topic == "known" and one.timestamp is not None
    assert [(h.key, bytes(h.value)) for h in one.headers] == [("from", b"p1")]


def test_a_batch_read_honours_starting_and_ending_offsets_exactly(spark, known):
    frame = _read(spark, known.bootstrap,
                  startingOffsets=json.dumps({"known": {"0": 5, "1": -2, "2": 29}}),
                  endingOffsets=json.dumps({"known": {"0": 10, "1": 3, "2": -1}}))
    assert [(p, o) for p, o, _v in _triples(frame)] == [(0, 5), (0, 6), (0, 7), (0, 8), (0, 9), (1, 0), (1, 1), (1, 2), (2, 29)]


def test_min_partitions_splits_ranges_without_losing_or_repeating_a_record(spark, known):
    frame = _read(spark, known.bootstrap, minPartitions="12")
    assert frame.rdd.getNumPartitions() >= 12
    assert _triples(frame) == _triples(_read(spark, known.bootstrap))


def test_starting_from_a_time_and_refusing_offsets_past_the_end(spark, known):
    everything = _read(spark, known.bootstrap).collect()
    cut = sorted(r.timestamp for r in everything)[len(everything) // 2]
    stamp_ms = int(cut.timestamp() * 1000)
    later = _read(spark, known.bootstrap, startingTimestamp=str(stamp_ms)).collect()
    assert later and all(int(r.timestamp.timestamp() * 1000) >= stamp_ms for r in later)
    assert {(r.partition, r.offset) for r in everything if int(r.timestamp.timestamp() * 1000) >= stamp_ms} <= \
        {(r.partition, r.offset) for r in later}
    with pytest.raises(Exception, match="past its end"):
        _read(spark, known.bootstrap, endingOffsets=json.dumps({"known": {"0": 31}})).collect()


def test_a_stream_reads_everything_once_in_micro_batches_of_at_most_max_offsets(spark, known, tmp_path):
    seen: list[tuple[int, int, bytes]] = []
    sizes: list[int] = []

    def record(batch, _batch_id) -> None:
        rows = _triples(batch)
        sizes.append(len(rows))
        seen.extend(rows)

    stream = (spark.readStream.format("tideway").option("bootstrap", known.bootstrap).option("subscribe", "known")
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "20").load())
    query = stream.writeStream.foreachBatch(record).option("checkpointLocation", str(tmp_path / "checkpoint")).start()
    try:
        query.processAllAvailable()
        assert sum(sizes) == PARTITIONS * PER_PARTITION and max(sizes) <= 20
        asyncio.run(_more(known.bootstrap))
        query.processAllAvailable()
    finally:
        query.stop()
    expected = [(p, i, b"v-%d-%d" % (p, i)) for p in range(PARTITIONS) for i in range(PER_PARTITION)]
    expected += [(0, PER_PARTITION + i, b"more-%d" % i) for i in range(5)]
    assert sorted(seen) == sorted(expected)  # every record once, the later ones too


async def _more(bootstrap: str) -> None:
    async with Producer(bootstrap, acks="all") as producer:
        for i in range(5):
            await producer.send("known", b"more-%d" % i, partition=0)


def test_share_out_gives_each_partition_its_part_of_the_budget():
    from tideway_server.spark_analytics.source import share_out

    start = {"t": {"0": 0, "1": 100, "2": 5}}
    latest = {"t": {"0": 30, "1": 110, "2": 5}}
    cut = share_out(start, latest, 20)
    assert sum(cut["t"][p] - start["t"][p] for p in cut["t"]) == 20
    assert cut["t"]["0"] - 0 == 15 and cut["t"]["1"] - 100 == 5 and cut["t"]["2"] == 5  # 30:10 waiting -> 15:5
    assert share_out(start, latest, 100) == latest  # everything fits
