"""brokers.aio.start_eagerly: how a broker connection runs each request's handler (up to its first wait at once)."""

import asyncio

import pytest

from brokers.aio import start_eagerly


async def test_a_coroutine_that_never_waits_finishes_inside_the_call():
    steps = []

    async def answer():
        steps.append("ran")
        return 42

    assert start_eagerly(answer()) is None
    assert steps == ["ran"]  # no loop turn needed


async def test_the_part_before_the_first_wait_runs_at_once_and_a_task_finishes_the_rest():
    steps = []
    loop = asyncio.get_running_loop()
    gate = loop.create_future()

    async def handler():
        steps.append("before")
        value = await gate
        steps.append(f"after {value}")
        await asyncio.sleep(0)  # a bare yield, then a real timer
        await asyncio.sleep(0.01)
        return value * 2

    task = start_eagerly(handler())
    assert steps == ["before"] and task is not None and not task.done()
    loop.call_soon(gate.set_result, 21)
    assert await task == 42
    assert steps == ["before", "after 21"]


async def test_a_bare_yield_lets_callbacks_scheduled_before_it_run_first():
    order = []
    loop = asyncio.get_running_loop()

    async def handler():
        loop.call_soon(order.append, "scheduled earlier")
        await asyncio.sleep(0)
        order.append("handler resumed")

    await start_eagerly(handler())
    assert order == ["scheduled earlier", "handler resumed"]


async def test_a_futures_exception_is_raised_inside_the_coroutine():
    loop = asyncio.get_running_loop()
    failing = loop.create_future()

    async def handler():
        try:
            await failing
        except KeyError as exc:
            return f"caught {exc.args[0]}"

    task = start_eagerly(handler())
    failing.set_exception(KeyError("boom"))
    assert await task == "caught boom"


async def test_cancelling_the_task_cancels_the_coroutine_where_it_waits():
    loop = asyncio.get_running_loop()
    never = loop.create_future()
    cleaned = []

    async def handler():
        try:
            await never
        finally:
            cleaned.append(True)

    task = start_eagerly(handler())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True] and never.cancelled()


async def test_a_cancel_after_the_awaited_future_completed_still_reaches_the_coroutine():
    loop = asyncio.get_running_loop()
    gate = loop.create_future()
    seen = []

    async def handler():
        try:
            await gate
            seen.append("resumed normally")
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = start_eagerly(handler())
    await asyncio.sleep(0)  # the task waits on the gate now
    gate.set_result(None)  # its wake-up is scheduled, not run ...
    task.cancel()  # ... when it is cancelled: as with a Task, the coroutine gets the CancelledError
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]


async def test_an_exception_before_the_first_wait_is_raised_by_the_call():
    async def broken():
        raise ValueError("bad")

    with pytest.raises(ValueError):
        start_eagerly(broken())
