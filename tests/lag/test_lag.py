"""Consumer lag with real processes (issue 18): a producer outruns a slow stream consumer; the monitoring worker
looks every second; the consumer_lag job (Spark) rolls up and judges.

* the sampled lag in seconds is the true age of the first unconsumed record (within a second), the test
  knowing when it sent every record;
* while lag grows the group is WARNING or ERROR, from the looks before the job has run and from the job after; once the consumer speeds up, the time-to-drain estimate is
  within 20% of the drain the test then measures; when the consumer stops, STOPPED;
* the job's minute rollups equal rollups computed here from the same samples read off ``__lag``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

from tests.harness.gateway import make_queue
from tests.harness.processes import OPERATOR_KEY, REPO_ROOT
from tideway.native import Consumer, GroupConsumer, Producer, TidewayClient

pytestmark = pytest.mark.timeout(600)

PRODUCE_RATE = 50  # messages a second, all the time
SLOW_RATE = 10  # the consumer at first
FAST_RATE = 80  # the consumer once it speeds up


def _job(plane) -> dict:
    done = subprocess.run([sys.executable, "manage.py", "spark_job", "consumer_lag", "--master", "local[2]"], cwd=REPO_ROOT,
                          env=plane.env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _lag(plane, key: str, name: str, group: str, **params) -> dict:
    with plane.client(key) as api:
        answer = api.get(f"/api/v1/queues/{name}/groups/{group}/lag", params=params)
        assert answer.status_code == 200, answer.text
        return answer.json()


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    rank = 0.95 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class Traffic:
    """A producer at a steady rate and a group consumer at a rate the test changes (paced by the clock)."""

    def __init__(self, bootstrap: str, key: str, name: str) -> None:
        self.bootstrap, self.key, self.name = bootstrap, key, name
        self.sent_ms: list[float] = []  # wall time each offset was sent (one partition)
        self.consume_rate = SLOW_RATE
        self.consuming = True
        self.stop = asyncio.Event()
        self.caught_up_at: float | None = None  # wall time the consumer first reached the log end after speeding up
        self.watch_catch_up = False

    async def produce(self) -> None:
        async with Producer(self.bootstrap, api_key=self.key, acks="all", linger_ms=0) as producer:
            started = time.time()
            while not self.stop.is_set():
                due = int((time.time() - started) * PRODUCE_RATE) + 1
                while len(self.sent_ms) < due:
                    self.sent_ms.append(time.time() * 1000)
                    await (await producer.send(self.name, b"m-%d" % len(self.sent_ms), partition=0))
                await asyncio.sleep(0.01)

    async def consume(self) -> None:
        async with TidewayClient(self.bootstrap, api_key=self.key) as client:
            member = GroupConsumer(client, "workers", [self.name], auto_offset_reset="earliest", enable_auto_commit=False)
            await member.start()
            position, budget, last = 0, 0.0, time.monotonic()
            try:
                while self.consuming:
                    now = time.monotonic()
                    budget = min(budget + (now - last) * self.consume_rate, self.consume_rate)  # at most a second's worth
                    last = now
                    if budget >= 1:
                        got = await member.getmany(timeout_ms=100, max_records=int(budget))
                        count = sum(len(records) for records in got.values())
                        if count:
                            budget -= count
                            position += count
                            await member.commit()
                        if self.watch_catch_up and self.caught_up_at is None and position >= len(self.sent_ms) - 1:
                            self.caught_up_at = time.time()
                    await asyncio.sleep(0.02)
            finally:
                await member.stop()


async def _read_lag_records() -> list[dict]:
    out = []
    async with TidewayClient(_BOOTSTRAP[0], api_key=OPERATOR_KEY) as client:
        from tideway.protocol import messages as m

        end, _ = await client.list_offset("__lag", 0, m.LATEST_TIMESTAMP)
        consumer = Consumer(client, auto_offset_reset="earliest", fetch_max_wait_ms=100)
        await consumer.start()
        await consumer.assign([("__lag", 0)], start="earliest")
        while consumer.position(("__lag", 0)) < end:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                out += [json.loads(r.value) for r in records]
        await consumer.stop()
    return out


_BOOTSTRAP: list[str] = []


def test_lag_in_seconds_status_time_to_drain_and_rollups_of_a_lagging_group(plane):
    _slug, key = plane.create_tenant(plan="team")
    name = make_queue(plane, key, partitions=1, mode="stream")
    _BOOTSTRAP[:] = [plane.deployment.bootstrap]
    traffic = Traffic(plane.deployment.bootstrap, key, name)
    checked: list[tuple[int, int]] = []  # (sampled lag ms, true age ms)
    results: dict = {}

    async def scenario() -> None:
        tasks = [asyncio.ensure_future(traffic.produce()), asyncio.ensure_future(traffic.consume())]
        seen_at = 0
        deadline = time.monotonic() + 20  # slow phase: lag grows (a look a second: 20 to compare)
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            live = await asyncio.to_thread(_live, plane, key, name)
            if live is None or live["at_ms"] == seen_at or not live["partitions"]:
                continue
            seen_at = live["at_ms"]
            position = live["partitions"][0]["position"]
            if position < len(traffic.sent_ms) and live["lag"] > 0:
                checked.append((live["lag_seconds"] * 1000, live["at_ms"] - traffic.sent_ms[position]))
        # Before the consumer_lag job has ever run, the status comes from the looks (issue 40: it was null).
        results["slow_looks"] = await asyncio.to_thread(_lag, plane, key, name, "workers")
        results["slow"] = await asyncio.to_thread(lambda: (_job(plane), _lag(plane, key, name, "workers"))[1])
        traffic.consume_rate = FAST_RATE
        await asyncio.sleep(12)  # a whole window (10 looks) of the faster consumer
        traffic.watch_catch_up = True
        results["fast"] = await asyncio.to_thread(lambda: (_job(plane), _lag(plane, key, name, "workers"))[1])
        while traffic.caught_up_at is None:
            await asyncio.sleep(0.2)
        traffic.consuming = False
        await tasks[1]
        await asyncio.sleep(14)  # a window with the group's member gone and the producer going on
        results["stopped"] = await asyncio.to_thread(lambda: (_job(plane), _lag(plane, key, name, "workers"))[1])
        traffic.stop.set()
        await tasks[0]
        results["records"] = await _read_lag_records()

    asyncio.run(scenario())

    # Lag in seconds: the true age of the first record not yet consumed, within a second.
    assert len(checked) >= 10, checked
    assert all(abs(sampled - true) <= 1000 for sampled, true in checked), checked

    # Statuses: growing lag is a warning or an error; a consumer gone is STOPPED.
    looks = results["slow_looks"]["status"]
    assert looks is not None and looks["source"] == "looks" and looks["status"] in ("WARNING", "ERROR"), looks
    assert results["slow_looks"]["live"]["status"] == looks and results["slow"]["status"]["source"] == "consumer_lag job"
    assert results["slow"]["status"]["status"] in ("WARNING", "ERROR"), results["slow"]["status"]
    assert results["stopped"]["status"]["status"] == "STOPPED", results["stopped"]["status"]

    # Time-to-drain, estimated at the end of the job's window, against the drain measured.
    fast = results["fast"]["status"]
    assert fast["drain_seconds"] is not None and not fast["falling_behind"], fast
    from datetime import datetime

    window_end = datetime.fromisoformat(fast["window_end"].replace("Z", "+00:00")).timestamp()
    measured = traffic.caught_up_at - window_end
    assert abs(fast["drain_seconds"] - measured) <= 0.2 * measured, (fast, measured)

    # The job's minute rollups against the same samples, rolled up here.
    window_end_ms = datetime.fromisoformat(results["stopped"]["status"]["window_end"].replace("Z", "+00:00")).timestamp() * 1000
    samples: dict[int, list[tuple[int, int]]] = {}
    for record in results["records"]:
        if record["at_ms"] > window_end_ms:
            continue
        for _tenant_id, queue, group, kind, _members, _in_flight, _dead, partitions in record["groups"]:
            if queue == name and group == "workers" and kind == "stream":
                total, worst = sum(row[3] for row in partitions), max(row[4] for row in partitions)
                samples.setdefault(record["at_ms"] // 60_000 * 60_000, []).append((total, worst))
    series = {datetime.fromisoformat(point["start"].replace("Z", "+00:00")).timestamp() * 1000: point
              for point in results["stopped"]["series"]}
    assert set(series) == set(samples), (sorted(series), sorted(samples))
    for start, values in samples.items():
        point = series[start]
        lags, ages = [v[0] for v in values], [v[1] for v in values]
        assert point["samples"] == len(values)
        assert point["lag_max"] == max(lags) and point["lag_seconds_max"] == max(ages) / 1000
        assert point["lag_mean"] == pytest.approx(sum(lags) / len(lags), abs=1e-3)
        assert point["lag_p95"] == pytest.approx(_p95(lags), abs=1e-3)
        assert point["lag_seconds_p95"] == pytest.approx(_p95(ages) / 1000, abs=1e-3)


def _live(plane, key: str, name: str) -> dict | None:
    with plane.client(key) as api:
        answer = api.get(f"/api/v1/queues/{name}/groups/workers/lag")
    if answer.status_code == 404:
        return None
    live = answer.json()["live"]
    if live is not None:
        live["lag_seconds"] = live["lag_ms"] / 1000
    return live
