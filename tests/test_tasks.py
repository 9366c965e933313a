"""Background tasks: a pause ends when released or when its time is up; a loop whose
cancellation is lost once still stops."""

from __future__ import annotations

import asyncio
import math

import pytest

from mindrouter.tasks import pause, release, stop_task


async def test_a_loop_that_loses_one_cancellation_still_stops() -> None:
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        while True:
            rounds += 1
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if rounds == 1:
                    continue  # the way a driver call that swallows it looks from here
                raise

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    await stop_task(task)
    assert task.cancelled() and rounds == 2


async def test_what_the_task_ended_with_is_raised() -> None:
    async def failing() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("boom")

    task = asyncio.create_task(failing())
    await asyncio.sleep(0.01)
    with pytest.raises(RuntimeError, match="boom"):
        await stop_task(task)


async def test_a_pause_ends_when_released_or_when_its_time_is_up() -> None:
    loop = asyncio.get_running_loop()
    for seconds in (3600.0, math.inf):
        waiter: asyncio.Future[None] = loop.create_future()
        paused = asyncio.ensure_future(pause(waiter, seconds))
        await asyncio.sleep(0)
        assert not paused.done()
        release(waiter)
        release(waiter)  # a second release is nothing
        await paused
    timed: asyncio.Future[None] = loop.create_future()
    await pause(timed, 0.01)
    assert timed.done()
