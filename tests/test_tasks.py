"""Stopping background tasks: a loop whose cancellation is lost once still stops."""

from __future__ import annotations

import asyncio

import pytest

from mindrouter.tasks import stop_task


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
