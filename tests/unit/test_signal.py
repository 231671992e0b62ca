"""tideway.aio.Signal: the event the producer's sender and the consumer's getmany wait on."""

import asyncio

from tideway.aio import Signal


async def test_set_wakes_every_waiter_and_a_timeout_says_so():
    signal = Signal()
    assert await signal.wait(0.01) is False  # nothing set: the timeout answers
    waiters = [asyncio.ensure_future(signal.wait(5)) for _ in range(3)]
    await asyncio.sleep(0)
    signal.set()
    assert await asyncio.gather(*waiters) == [True, True, True]
    assert await signal.wait(0) is True  # still set until cleared
    signal.clear()
    assert await signal.wait(0.01) is False


async def test_a_cancelled_wait_leaves_nothing_behind():
    signal = Signal()
    waiter = asyncio.ensure_future(signal.wait())
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert waiter.cancelled()
    assert not signal._waiters
    signal.set()  # no one to wake, no error
