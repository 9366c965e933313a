"""The gateway's background tasks: pausing them cheaply and stopping them; and `Alarm`, one timer
for a deadline that moves on."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable
from typing import Any

from mindrouter.observability.logging import log

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


# uvloop rounds a timer to the millisecond and may run it up to that much before its time.
SLACK_S = 1e-3
# A check that raised is run again this much later: the deadline it keeps must not be dropped.
CHECK_RETRY_S = 1.0


class Alarm:
    """One timer for deadlines that move on faster than they fall due (one a request or a
    command): set and cancelled for each, a timer costs a few microseconds. `arm(when, check)`
    makes sure `check(now)` runs at `when` at the latest; `check` does what is due and answers
    when to look again (None: not until armed again). A `check` that finds its deadline not
    quite reached (the timer ran early) is run again at least SLACK_S later, never in the same
    turn. The check is held only while the alarm is armed, as a timer holds its callback, so an
    owner that cancels (or lets it ring) is not kept in a loop of references by it. A check
    that raises is logged and run again CHECK_RETRY_S later, so the deadline it keeps (a
    stream's idle timeout, a statement's) is not silently dropped."""

    __slots__ = ("_check", "_handle", "_when")

    def __init__(self) -> None:
        self._check: Callable[[float], float | None] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._when = math.inf

    def arm(self, when: float, check: Callable[[float], float | None]) -> None:
        if self._handle is not None:
            if self._when <= when:
                return
            self._handle.cancel()
        self._when, self._check = when, check
        self._handle = asyncio.get_running_loop().call_at(when, self._ring)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._check = None

    def _ring(self) -> None:
        check, self._handle, self._check = self._check, None, None
        if check is None:
            return
        now = asyncio.get_running_loop().time()
        try:
            again = check(now)
        except Exception:
            log.exception("a timer's check failed; it runs again shortly")
            again = now + CHECK_RETRY_S
        if again is not None:
            self.arm(max(again, now + SLACK_S), check)
