"""The background exchange of a shared store with Redis: the loop that runs it (`ExchangeLoop`),
and its outages, logged when they start and when they end, not once per failed attempt in
between."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mindrouter.observability.logging import log
from mindrouter.tasks import stop_task


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
    every `interval` seconds (asked again after each call when it is a function; `retry_after`
    after one that failed). `poke`, called when the store has news for the other processes,
    cuts the pause short, but never below `min_gap`: that bounds the exchanges a busy process
    makes, however often it has news."""

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
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def poke(self) -> None:
        self._wake.set()

    def start(self) -> None:
        """Starts the exchanges (a first one right away); nothing if they already run."""
        if self._task is None:
            self._stopping.clear()
            self._task = asyncio.create_task(self._run(), name=f"{self._what}-sync")

    async def stop(self, grace: float) -> None:
        """Stops the exchanges, letting one in progress finish for up to `grace` seconds
        (cancelling it could leave its writes in doubt) before cancelling it."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping.set()
        self._wake.set()
        _, running = await asyncio.wait({task}, timeout=grace)
        if running:
            await stop_task(task)

    async def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                ok = await self._sync()
            except Exception as exc:  # a bug must not stop the sharing for good
                log.error(f"{self._what} sync failed", exc_info=exc)
                ok = False
            interval = self._interval
            pause = (interval() if callable(interval) else interval) if ok else self._retry_after
            if self._min_gap > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self._min_gap)
                pause -= self._min_gap
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(pause, 0.0))
