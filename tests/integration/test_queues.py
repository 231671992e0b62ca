"""The queue model on a real broker: locks, acks, redelivery, dead letters, delays, FIFO, long polling."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.harness.waiting import eventually
from tideway.native import Producer, TidewayClient
from tideway.native.group import describe_group
from tideway.native.queue import DEADLINE_HEADER, QueueConsumer, list_dead_letters, redrive
from tideway.protocol import errors
from tideway.protocol.messages import AcceptRange, ApiKey, ShareAcknowledgeRequest

pytestmark = pytest.mark.timeout(120)

FAST = {"queue.retry.backoff.ms": "50", "queue.retry.backoff.max.ms": "200", "queue.visibility.timeout.ms": "2000"}


async def _topic(bootstrap: str, name: str, partitions: int = 2, **settings: str) -> None:
    async with TidewayClient(bootstrap) as client:
        await client.create_topic(name, partitions=partitions, configs={**FAST, **settings})


async def _publish(bootstrap: str, topic: str, values: list[bytes], **kwargs) -> None:
    async with Producer(bootstrap, acks="all") as producer:
        await asyncio.gather(*[await producer.send(topic, v, **kwargs) for v in values])


async def _drain(queue: QueueConsumer, *, until: int, wait_ms: int = 500, timeout_s: float = 20) -> list:
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < until and time.monotonic() < deadline:
        got += await queue.receive(100, wait_ms=wait_ms)
    return got


def _accepted(body) -> int:
    """Offsets a SHARE_ACKNOWLEDGE request accepts through its ranges."""
    return sum(r.last_offset - r.first_offset + 1 for r in body.accepts)


def _count_acknowledge_requests(queue: QueueConsumer, measure) -> list:
    """``measure(request)`` of every SHARE_ACKNOWLEDGE ``queue`` sends from now on, in a list that grows."""
    sent = []
    request = queue.link.request

    async def counting(api, body, **kwargs):
        if api is ApiKey.SHARE_ACKNOWLEDGE:
            sent.append(measure(body))
        return await request(api, body, **kwargs)

    queue.link.request = counting
    return sent


async def test_every_message_accepted_once_across_workers(broker):
    await _topic(broker.bootstrap, "jobs", partitions=3)
    await _publish(broker.bootstrap, "jobs", [str(i).encode() for i in range(300)])
    accepted: list[bytes] = []

    async def worker(n: int):
        async with QueueConsumer(broker.bootstrap, "workers", "jobs", member_id=f"w{n}") as queue:
            idle = 0
            while idle < 3:
                messages = await queue.receive(25, wait_ms=300)
                idle = 0 if messages else idle + 1
                await queue.ack(messages)
                accepted.extend(m.value for m in messages)

    await asyncio.gather(*(worker(n) for n in range(4)))
    assert sorted(accepted) == sorted(str(i).encode() for i in range(300))
    async with TidewayClient(broker.bootstrap) as client:
        description = await describe_group(client, "workers")
    assert description.group_type == "queue"
    assert sum(p.in_flight for p in description.share_partitions) == 0


async def test_release_redelivers_and_the_limit_dead_letters_with_headers_then_redrive(broker):
    await _topic(broker.bootstrap, "tasks", partitions=1, **{"queue.max.deliveries": "3"})
    await _publish(broker.bootstrap, "tasks", [b"good", b"poison"])
    async with QueueConsumer(broker.bootstrap, "g", "tasks") as queue:
        deliveries = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for message in await queue.receive(10, wait_ms=300):
                deliveries.append((message.value, message.delivery_count))
                if message.value == b"poison":
                    await queue.nack([message], error=f"cannot parse (try {message.delivery_count})")
                else:
                    await queue.ack([message])
            if (b"poison", 3) in deliveries:
                break
        assert deliveries.count((b"good", 1)) == 1
        assert [c for v, c in deliveries if v == b"poison"] == [1, 2, 3]
        async with TidewayClient(broker.bootstrap) as client:
            dead: list = []
            deadline = time.monotonic() + 10
            while not dead and time.monotonic() < deadline:
                try:
                    dead = await list_dead_letters(client, "tasks.dlq")
                except errors.UnknownTopicOrPartitionError:
                    await asyncio.sleep(0.2)
            (letter,) = dead
            assert letter["value"] == b"poison"
            headers = letter["headers"]
            assert headers["tideway-dlq-origin-topic"] == "tasks"
            assert headers["tideway-dlq-origin-partition"] == "0"
            assert headers["tideway-dlq-origin-offset"] == "1"
            assert headers["tideway-dlq-delivery-count"] == "3"
            assert headers["tideway-dlq-last-error"] == "cannot parse (try 3)"
            assert 0 < int(headers["tideway-dlq-first-delivery-ms"]) <= int(headers["tideway-dlq-last-delivery-ms"])
            assert await queue.receive(10, wait_ms=300) == []  # not redelivered from the source
            assert await redrive(client, "tasks.dlq", rate_per_s=50) == 1
            assert await list_dead_letters(client, "tasks.dlq") == []  # redriven ones are not listed again
        (back,) = await _drain(queue, until=1)
        assert back.value == b"poison" and back.delivery_count == 1 and back.offset == 2
        await queue.reject([back], error="still bad")
        async with TidewayClient(broker.bootstrap) as client:
            letters = await eventually(lambda: list_dead_letters(client, "tasks.dlq"), 10, "the rejected message's dead letter")
            assert letters[0]["headers"]["tideway-dlq-last-error"] == "still bad"


async def test_visibility_timeout_expiry_redelivers_and_old_receipt_fails(broker):
    await _topic(broker.bootstrap, "slow", partitions=1)
    await _publish(broker.bootstrap, "slow", [b"x"])
    async with QueueConsumer(broker.bootstrap, "g", "slow") as queue:
        (first,) = await queue.receive(1, wait_ms=2000, lock_ms=1000)
        assert await queue.receive(1, wait_ms=200) == []  # locked
        (second,) = await _drain(queue, until=1, wait_ms=3000)
        assert second.offset == first.offset and second.delivery_count == 2
        with pytest.raises(errors.InvalidRecordStateError):
            await queue.ack([first])
        deadlines = await queue.extend([second], 10_000)
        assert deadlines[0] >= int(time.time() * 1000) + 9_000
        await asyncio.sleep(2.5)  # past the queue's 2 s default lock; the extension holds
        await queue.ack([second.receipt])


async def test_an_acquisition_is_written_to_the_group_log_and_survives_a_restart(broker):
    # Receivers do not wait for the acquisition's write, but it is made: after a restart the
    # coordinator still knows the lock and the delivery, so the message is neither handed out
    # again at once nor counted as a first delivery.
    await _topic(broker.bootstrap, "held", partitions=1)
    await _publish(broker.bootstrap, "held", [b"x"])
    async with QueueConsumer(broker.bootstrap, "g", "held") as queue:
        (first,) = await queue.receive(1, wait_ms=2000, lock_ms=6000)  # outlasts the restart
        assert first.delivery_count == 1
    assert broker.terminate() == 0
    broker.restart()
    async with QueueConsumer(broker.bootstrap, "g", "held") as queue:
        assert await queue.receive(1, wait_ms=300) == []  # still locked
        (second,) = await _drain(queue, until=1, wait_ms=1000)
        assert (second.offset, second.delivery_count) == (first.offset, 2)
        await queue.ack([second])


async def test_deliver_at_and_default_delay(broker):
    await _topic(broker.bootstrap, "later", partitions=1)
    at = int(time.time() * 1000) + 1500
    await _publish(broker.bootstrap, "later", [b"delayed"], headers=[(DEADLINE_HEADER, str(at).encode())])
    await _publish(broker.bootstrap, "later", [b"now"])
    async with QueueConsumer(broker.bootstrap, "g", "later") as queue:
        (now,) = await queue.receive(10, wait_ms=1000)
        assert now.value == b"now"
        await queue.ack([now])
        (delayed,) = await _drain(queue, until=1, wait_ms=3000)
        assert delayed.value == b"delayed" and int(time.time() * 1000) >= at
    await _topic(broker.bootstrap, "default-delay", partitions=1, **{"queue.delivery.delay.ms": "800"})
    sent = int(time.time() * 1000)
    await _publish(broker.bootstrap, "default-delay", [b"d"])
    async with QueueConsumer(broker.bootstrap, "g2", "default-delay") as queue:
        (message,) = await _drain(queue, until=1, wait_ms=3000)
        assert int(time.time() * 1000) - sent >= 800 - 50  # the record's timestamp is a few ms after `sent`


async def test_fifo_keys_one_in_flight_in_order(broker):
    await _topic(broker.bootstrap, "fifo", partitions=1, **{"queue.fifo": "true"})
    async with Producer(broker.bootstrap, acks="all") as producer:
        for i in range(4):
            for key in (b"a", b"b"):
                await (await producer.send("fifo", f"{key.decode()}{i}".encode(), key=key))
    async with QueueConsumer(broker.bootstrap, "g", "fifo") as queue:
        order: dict[bytes, list[bytes]] = {b"a": [], b"b": []}
        while sum(len(v) for v in order.values()) < 8:
            messages = await queue.receive(10, wait_ms=1000)
            keys = [m.key for m in messages]
            assert len(keys) == len(set(keys)), "two in-flight records of one key"
            for message in messages:
                order[message.key].append(message.value)
            await queue.ack(messages)
        assert order == {b"a": [b"a0", b"a1", b"a2", b"a3"], b"b": [b"b0", b"b1", b"b2", b"b3"]}


async def test_long_poll_returns_as_soon_as_a_message_arrives(broker):
    await _topic(broker.bootstrap, "poll", partitions=1)
    async with QueueConsumer(broker.bootstrap, "g", "poll") as queue:
        assert await queue.receive(1, wait_ms=200) == []
        receiving = asyncio.ensure_future(queue.receive(1, wait_ms=10_000))
        await asyncio.sleep(0.5)
        assert not receiving.done()
        await _publish(broker.bootstrap, "poll", [b"hello"])
        (message,) = await asyncio.wait_for(receiving, 5)
        assert message.value == b"hello"


async def test_in_flight_cap_and_bad_requests(broker):
    await _topic(broker.bootstrap, "capped", partitions=1, **{"queue.max.inflight": "3"})
    await _publish(broker.bootstrap, "capped", [b"%d" % i for i in range(10)])
    async with QueueConsumer(broker.bootstrap, "g", "capped") as queue:
        first = await queue.receive(10, wait_ms=1000)
        assert len(first) == 3
        assert await queue.receive(10, wait_ms=200) == []
        await queue.ack(first[:1])
        assert len(await queue.receive(10, wait_ms=1000)) == 1
        with pytest.raises(errors.InvalidRequestError):
            await queue.ack(["not-a-receipt"])
        with pytest.raises(errors.InvalidRecordStateError):
            await queue.ack(["0:9:1"])  # never delivered
    async with QueueConsumer(broker.bootstrap, "g", "no-such-topic") as queue:
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            await queue.receive(1)


def test_blocking_clients_for_both_models(broker):
    from tideway.native import SyncClient, SyncGroupConsumer, SyncProducer, SyncQueueConsumer

    with SyncClient(broker.bootstrap) as client:
        client.create_topic("sync-q", partitions=1)
        client.create_topic("sync-s", partitions=1)
    with SyncProducer(broker.bootstrap, acks="all") as producer:
        producer.send_many("sync-q", [b"a", b"b"])
        producer.send_many("sync-s", [b"x", b"y"])
    with SyncQueueConsumer(broker.bootstrap, "sync-workers", "sync-q") as queue:
        messages = queue.receive(10, wait_ms=2000)
        assert [m.value for m in messages] == [b"a", b"b"]
        queue.extend(messages[:1], 5000)
        queue.ack(messages[:1])
        queue.nack(messages[1:], delay_ms=0)
        (again,) = queue.receive(10, wait_ms=2000)
        assert again.value == b"b" and again.delivery_count == 2
        queue.ack([again])
    with SyncGroupConsumer(broker.bootstrap, "sync-readers", ["sync-s"], auto_offset_reset="earliest") as member:
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            got += [r.value for records in member.poll(500).values() for r in records]
        assert got == [b"x", b"y"]
        member.commit()


async def test_acks_of_one_loop_turn_go_in_one_request_and_each_answers_for_its_own(broker):
    """Handlers finishing together each ack their own message: one request carries them; one stale receipt fails alone."""
    await _topic(broker.bootstrap, "per-message", partitions=2)
    await _publish(broker.bootstrap, "per-message", [str(i).encode() for i in range(200)])
    async with QueueConsumer(broker.bootstrap, "handlers", "per-message") as queue:
        messages = await _drain(queue, until=200)
        assert len(messages) == 200
        request = queue.link.request
        sent = _count_acknowledge_requests(queue, lambda body: (len(body.acks), _accepted(body), len(body.accepts)))
        stale = (messages[0].partition, messages[0].offset, messages[0].delivery_count + 1)  # a delivery that never was
        outcomes = await asyncio.gather(queue.ack([stale]), *(queue.ack([m]) for m in messages[1:]), return_exceptions=True)
        # One request; the accepts as ranges of consecutive offsets (per partition, and the stale delivery apart).
        ((acks, accepted, ranges),) = sent
        assert (acks, accepted) == (0, 200) and ranges <= 5, sent
        queue.link.request = request
        assert isinstance(outcomes[0], errors.InvalidRecordStateError)
        assert not any(isinstance(outcome, BaseException) for outcome in outcomes[1:])
        await queue.ack([messages[0]])
        assert await queue.receive(10, wait_ms=300) == []  # every message accepted: nothing comes back
    async with TidewayClient(broker.bootstrap) as client:
        description = await describe_group(client, "handlers")
    assert sum(p.in_flight for p in description.share_partitions) == 0


async def test_acks_lingering_across_loop_turns_share_one_request_and_stop_sends_them(broker):
    """With ``ack_linger_ms`` (the gateway's setting), acks made in turns apart within it go in one request;
    a release, or an accept asking to linger less, takes them at once; stopping the consumer sends what
    still lingers instead of dropping it."""
    await _topic(broker.bootstrap, "lingering", partitions=1)
    await _publish(broker.bootstrap, "lingering", [str(i).encode() for i in range(30)])
    async with QueueConsumer(broker.bootstrap, "lingerers", "lingering", ack_linger_ms=1000) as queue:
        messages = await _drain(queue, until=30)
        assert len(messages) == 30
        sent = _count_acknowledge_requests(queue, _accepted)
        answers = []
        for message in messages[:20]:  # one ack per loop turn, as slow clients' acks come in
            answers.append(queue.ack([message]))
            await asyncio.sleep(0.001)
        await asyncio.gather(*answers)
        assert sent == [20]  # without the linger: 20 requests
        # A release does not linger: it is sent within a few loop turns (not after the linger's second),
        # taking the accepts waiting then with it.
        accepted = queue.ack(messages[20:25])
        released = queue.nack([messages[25]], delay_ms=0)
        for _ in range(3):
            await asyncio.sleep(0)
        assert sent == [20, 5]
        await released
        assert accepted.done()
        # An accept whose caller waits for the answer (the gateway's REST acks) asks to linger less: it
        # goes within a few loop turns too, with the accepts lingering then.
        lingering = queue.ack(messages[26:28])
        await asyncio.sleep(0.001)
        prompt = queue.ack(messages[28:29], linger_ms=0)
        for _ in range(3):
            await asyncio.sleep(0)
        assert sent == [20, 5, 3]
        await prompt
        assert lingering.done()
        lingering = queue.ack(messages[29:])
    assert sent == [20, 5, 3, 1] and lingering.done() and lingering.exception() is None
    async with TidewayClient(broker.bootstrap) as client:
        assert sum(p.in_flight for p in (await describe_group(client, "lingerers")).share_partitions) == 0


async def test_accept_ranges_that_are_malformed_or_too_long_are_refused_and_change_nothing(broker):
    await _topic(broker.bootstrap, "ranges", partitions=1)
    await _publish(broker.bootstrap, "ranges", [b"a", b"b", b"c"])
    async with QueueConsumer(broker.bootstrap, "rangers", "ranges") as queue:
        messages = await _drain(queue, until=3)
        assert len(messages) == 3
        for accepts in ([AcceptRange(0, 2, 0, 1)],  # backwards
                        [AcceptRange(0, 0, 2, 1), AcceptRange(0, 3, 200_002, 1)]):  # 200,003 offsets: past the bound
            with pytest.raises(errors.InvalidRequestError):
                await queue.link.request(ApiKey.SHARE_ACKNOWLEDGE, ShareAcknowledgeRequest(
                    group_id="rangers", topic="ranges", accepts=accepts))
        async with TidewayClient(broker.bootstrap) as client:
            assert sum(p.in_flight for p in (await describe_group(client, "rangers")).share_partitions) == 3
        # A range naming offsets some of which are not held: those fail, the others are accepted.
        response = await queue.link.request(ApiKey.SHARE_ACKNOWLEDGE, ShareAcknowledgeRequest(
            group_id="rangers", topic="ranges", accepts=[AcceptRange(0, 0, 4, 1)]))
        assert sorted(r.offset for r in response.accept_failures) == [3, 4]
        assert {r.error_code for r in response.accept_failures} == {errors.InvalidRecordStateError.errno}
        async with TidewayClient(broker.bootstrap) as client:
            assert sum(p.in_flight for p in (await describe_group(client, "rangers")).share_partitions) == 0
