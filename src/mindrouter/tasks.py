"""The gateway's background tasks: pausing them cheaply and stopping them."""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import Any

# How long a stop waits after each cancel before cancelling again.
_RECANCEL_S = 0.1


async def stop_task(task: asyncio.Task[Any]) -> None:
    """Cancels `task` and waits until it has ended; an exception it ended with is raised.

    One cancel is not always enough: Python 3.11's `asyncio.wait_for` returns the result, and
    drops the cancellation, when the two arrive together, and database drivers use it inside
    their calls (asyncmy does when it connects to MariaDB). A background loop would then go on
    to its next sleep and the stop would wait forever; so the task is cancelled again until it
    ends.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=_RECANCEL_S)
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def pause(waiter: asyncio.Future[None], seconds: float) -> None:
    """Waits until `release(waiter)`, or `seconds` (`math.inf`: no limit). One future and one
    timer, no task: `asyncio.wait_for` would start a task at every pause, and the loops that
    pause do so several times a second, or once per request."""
    timer = (
        waiter.get_loop().call_later(seconds, release, waiter) if math.isfinite(seconds) else None
    )
    try:
        await waiter
    finally:
        if timer is not None:
            timer.cancel()


def release(waiter: asyncio.Future[None]) -> None:
    """Ends the pause on `waiter`; nothing if it is over."""
    if not waiter.done():
        waiter.set_result(None)
