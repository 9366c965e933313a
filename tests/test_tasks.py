"""Background tasks: a pause ends when released or when its time is up; a loop whose
cancellation is lost once still stops; an alarm rings at the earliest time it was armed for."""

from __future__ import annotations

import asyncio
import math

import pytest

from mindrouter import tasks
from mindrouter.tasks import SLACK_S, Alarm, pause, release, stop_task


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


async def test_an_alarm_rings_once_at_its_earliest_time_and_again_when_asked() -> None:
    loop = asyncio.get_running_loop()
    rings: list[float] = []
    again = [True]

    def check(now: float) -> float | None:
        rings.append(now)
        if again[0]:
            again[0] = False
            return now  # "not quite yet": looked at again, but never in the same turn
        return None

    alarm = Alarm()
    start = loop.time()
    alarm.arm(start + 0.05, check)
    alarm.arm(start + 0.02, check)  # earlier: moves the timer
    alarm.arm(start + 0.5, check)  # later: changes nothing
    for _ in range(500):
        if len(rings) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(rings) == 2
    assert rings[0] >= start + 0.02 - SLACK_S
    assert rings[1] >= rings[0] + SLACK_S / 2
    alarm.arm(loop.time() + 0.01, check)
    alarm.cancel()
    await asyncio.sleep(0.05)
    assert len(rings) == 2


async def test_a_check_that_raises_is_logged_and_run_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The deadline the check keeps (a stream's idle timeout, a statement's) must not be dropped
    # because the check failed once.
    monkeypatch.setattr(tasks, "CHECK_RETRY_S", 0.02)
    loop = asyncio.get_running_loop()
    calls: list[float] = []

    def check(now: float) -> float | None:
        calls.append(now)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return None

    alarm = Alarm()
    alarm.arm(loop.time(), check)
    for _ in range(200):
        if len(calls) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(calls) == 2
    assert calls[1] >= calls[0] + 0.02 - SLACK_S
    captured = capsys.readouterr()
    assert "a timer's check failed" in captured.out + captured.err
