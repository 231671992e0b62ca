"""The scrubber in a running broker: after a pass it wakes for the next one, which finds new damage."""

import asyncio
import glob

from tests.harness.waiting import eventually
from tests.unit.test_log_integrity import flip_byte_in_batch
from tideway.native import Producer, TidewayClient


async def test_the_scrubber_wakes_for_its_next_pass_and_finds_damage_done_since_the_last(broker_factory):
    # Passes at most every 2 s: the first reads the records as they come, the broker's scrub timer then
    # sleeps until the next pass is due (Scrubber.idle_for) and must wake for it: that pass reads the
    # damaged batch. (That it does not step meanwhile is Scrubber.idle_for's unit test.)
    broker = broker_factory(extra_args=["--scrub-pass-interval", "2"])
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("kept")
        async with Producer(client, linger_ms=0) as producer:
            for i in range(20):
                await producer.send_and_wait("kept", b"record %02d" % i)
    (segment,) = glob.glob(str(broker.data_dir / "kept-0" / "*.log"))
    await asyncio.sleep(0.5)  # the first pass has read them (it began at start-up; 20 small batches)
    damaged = flip_byte_in_batch(segment, 5)
    await eventually(lambda: "found by the scrubber" in broker.log_text(), 15, "the scrubber finding the damaged batch")
    log_text = broker.log_text()
    assert f"the batch at offset {damaged} is damaged (CRC mismatch" in log_text
