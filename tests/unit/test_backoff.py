"""The one retry policy: pauses grow to a ceiling, carry jitter, restart after a success, stop at a deadline."""

import asyncio

from tideway.retry import Backoff


def test_pauses_double_up_to_the_ceiling_with_jitter_below_each_step():
    backoff = Backoff(initial_s=0.1, max_s=0.8, jitter=0.2)
    pauses = [backoff.delay() for _ in range(6)]
    for pause, step in zip(pauses, [0.1, 0.2, 0.4, 0.8, 0.8, 0.8], strict=True):
        assert step * 0.8 <= pause <= step
    backoff.reset()
    assert 0.08 <= backoff.delay() <= 0.1


def test_many_clients_failing_together_do_not_retry_together():
    pauses = {round(Backoff(initial_s=1.0).delay(), 6) for _ in range(50)}
    assert len(pauses) > 40


async def test_wait_gives_up_past_the_deadline_without_pausing():
    backoff = Backoff(initial_s=0.01, max_s=0.01, deadline_s=0.05)
    waits = 0
    while await backoff.wait():
        waits += 1
        assert waits < 100
    assert waits >= 2


async def test_a_wakeup_cuts_the_pause_short():
    backoff = Backoff(initial_s=30.0, max_s=30.0)
    wakeup = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, wakeup.set)
    assert await asyncio.wait_for(backoff.wait(wakeup), 5)
