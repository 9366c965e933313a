"""The background exchange of a shared store with Redis: the loop that runs it (`ExchangeLoop`),
and its outages, logged when they start and when they end, not once per failed attempt in
between."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mindrouter.observability.logging import log
from mindrouter.tasks import pause, release, stop_task


class Outage:
    def __init__(self, down: str, back: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._down_message = down  # logged as a warning when exchanges start failing
        self._back_message = back  # logged when one succeeds again
        self._clock = clock
        self.since: float | None = None

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    def failed(self, reason: str, **context: Any) -> None:
        if self.since is None:
            self.since = self._clock()
            log.warning(self._down_message, reason=reason, **context)

    def succeeded(self) -> None:
        if self.since is not None:
            log.info(self._back_message, after_s=round(self._clock() - self.since, 3))
            self.since = None


class ExchangeLoop:
    """A store's background exchange with Redis, as a task it starts and stops: calls `sync`
    every `interval` seconds (asked again after each call when it is a function, and `math.inf`
    waits for a poke alone; `retry_after` after one that failed). `poke`, called when the store
    has news for the other processes, cuts the pause short, but never below `min_gap`: that
    bounds the exchanges a busy process makes, however often it has news.

    The pause is one future and at most two timers, no task: an idle gateway runs these loops
    several times a second, and `asyncio.wait_for` would create a task for each pause."""

    def __init__(
        self,
        sync: Callable[[], Awaitable[bool]],
        *,
        interval: float | Callable[[], float],
        retry_after: float,
        what: str,
        min_gap: float = 0.0,
    ) -> None:
        self._sync = sync
        self._interval = interval
        self._retry_after = retry_after
        self._what = what
        self._min_gap = min_gap
        self._poked = False  # news since the current exchange began
        self._stopping = False
        self._waiter: asyncio.Future[None] | None = None  # the pause running now
        self._earliest = 0.0  # (loop time) a poke ends the pause no sooner than this
        self._gap: asyncio.TimerHandle | None = None  # a poke waiting for `_earliest`
        self._task: asyncio.Task[None] | None = None

    def poke(self) -> None:
        self._poked = True
        waiter = self._waiter
        if waiter is None or waiter.done() or self._gap is not None:
            return
        loop = waiter.get_loop()
        if loop.time() >= self._earliest:
            waiter.set_result(None)
        else:
            self._gap = loop.call_at(self._earliest, release, waiter)

    def start(self) -> None:
        """Starts the exchanges (a first one right away); nothing if they already run."""
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._run(), name=f"{self._what}-sync")

    async def stop(self, grace: float) -> None:
        """Stops the exchanges, letting one in progress finish for up to `grace` seconds
        (cancelling it could leave its writes in doubt) before cancelling it."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        if self._waiter is not None:
            release(self._waiter)
        _, running = await asyncio.wait({task}, timeout=grace)
        if running:
            await stop_task(task)

    async def _run(self) -> None:
        while not self._stopping:
            self._poked = False
            try:
                ok = await self._sync()
            except Exception as exc:  # a bug must not stop the sharing for good
                log.error(f"{self._what} sync failed", exc_info=exc)
                ok = False
            interval = self._interval
            rest = (interval() if callable(interval) else interval) if ok else self._retry_after
            await self._rest(max(rest, 0.0))

    async def _rest(self, seconds: float) -> None:
        """Waits `seconds`, or until a poke (made during the exchange too) after
        `min_gap`."""
        if self._stopping:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._earliest = now + min(self._min_gap, seconds)
        deadline = self._earliest if self._poked else now + seconds
        if deadline <= now:
            return
        self._waiter = loop.create_future()
        try:
            await pause(self._waiter, deadline - now)
        finally:
            self._waiter = None
            if self._gap is not None:
                self._gap.cancel()
                self._gap = None
