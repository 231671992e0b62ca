"""The reading rules of __usage in Spark (spark_analytics.usage), on records written here: duplicates by id,
ingress ranges contained in others, every metric of brokers and gateway, hours and tenants."""

from __future__ import annotations

import json

HOUR = 3_600_000
T0 = 1_795_000_000_000 // HOUR * HOUR  # an hour's start


def _record(id_: str, at_ms: int, **lists) -> bytes:
    body = {"id": id_, "source": id_.split(":")[0], "at_ms": at_ms, "ingress": [], "egress": [], "requests": [],
            "storage": [], **lists}
    return json.dumps(body).encode()


def _frame(spark, values: list[bytes]):
    """Rows as the tideway source gives them (value, partition, offset): the records in order on two partitions."""
    return spark.createDataFrame([(value, n % 2, n // 2) for n, value in enumerate(values)],
                                 "value binary, partition int, offset long")


def test_duplicates_and_contained_ranges_count_once_and_every_metric_lands_in_its_hour(spark):
    from tideway_server.spark_analytics.usage import MALFORMED, usage_rollup

    records = [
        _record("broker-1:1:1", T0 + 10, ingress=[["t5.orders", 0, 0, 10, 10, 1000]], egress=[["t5.orders", 4, 400]],
                requests=[["t5.", 3]], storage=[["t5.orders", 0, 6000, 60.0]]),
        _record("broker-1:1:1", T0 + 10, ingress=[["t5.orders", 0, 0, 10, 10, 1000]], egress=[["t5.orders", 4, 400]],
                requests=[["t5.", 3]], storage=[["t5.orders", 0, 6000, 60.0]]),  # sent twice: one id
        _record("broker-1:1:2", T0 + 20, ingress=[["t5.orders", 0, 10, 15, 5, 500]]),
        # broker 1 died before committing its position: broker 2 metered [0, 20) again, and more
        _record("broker-2:7:1", T0 + HOUR + 5, ingress=[["t5.orders", 0, 0, 20, 20, 2000]], egress=[["t5.orders", 1, 100]]),
        _record("broker-2:7:2", T0 + HOUR + 6, ingress=[["t5.orders.dlq", 1, 0, 2, 2, 50], ["t6.events", 0, 0, 3, 3, 300]]),
        _record("gateway-h-1:9:1", T0 + HOUR + 7, gateway=[["t5.orders", 6, 1234, 5678]]),
        b"not json",
        b'{"id": "broker-3:1:1", "at_ms": "yesterday"}',
    ]
    frame = _frame(spark, records)
    rows = {(r.tenant_id, r.queue, r.metric, r.hour_ms): r.value for r in usage_rollup(frame, T0, T0 + 2 * HOUR).collect()}
    assert rows.pop((None, "", MALFORMED, 0)) == 2  # counted, so the job can say it skipped them
    assert rows == {
        (5, "orders", "messages_out", T0): 4, (5, "orders", "bytes_out", T0): 400, (5, "", "requests", T0): 3,
        (5, "orders", "storage_byte_seconds", T0): 6000, (5, "orders", "partition_seconds", T0): 60,
        # [0, 10) and [10, 15) are inside [0, 20): only the larger range counts, in the hour it was reported
        (5, "orders", "messages_in", T0 + HOUR): 20, (5, "orders", "bytes_in", T0 + HOUR): 2000,
        (5, "orders", "messages_out", T0 + HOUR): 1, (5, "orders", "bytes_out", T0 + HOUR): 100,
        (5, "orders.dlq", "messages_in", T0 + HOUR): 2, (5, "orders.dlq", "bytes_in", T0 + HOUR): 50,
        (6, "events", "messages_in", T0 + HOUR): 3, (6, "events", "bytes_in", T0 + HOUR): 300,
        (5, "orders", "gateway_requests", T0 + HOUR): 6, (5, "orders", "gateway_bytes_in", T0 + HOUR): 1234,
        (5, "orders", "gateway_bytes_out", T0 + HOUR): 5678,
    }
    later = usage_rollup(frame, T0 + 2 * HOUR, T0 + 3 * HOUR).collect()  # another period: nothing but the count
    assert [(r.metric, r.value) for r in later] == [(MALFORMED, 2)]
