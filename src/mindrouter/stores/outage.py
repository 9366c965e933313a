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


async def exchange_forever(
    sync: Callable[[], Awaitable[bool]],
    stopping: asyncio.Event,
    *,
    interval: float | Callable[[], float],
    retry_after: float,
    what: str,
    wake: asyncio.Event | None = None,
    min_gap: float = 0.0,
) -> None:
    """Calls `sync` every `interval` seconds (asked again after each call when it is a function;
    `retry_after` after one that failed) until `stopping` is set. `wake`, set by whoever has
    news (and by whoever sets `stopping`), cuts the pause short, but never below `min_gap`: that
    bounds the exchanges a busy process makes, however often it has news."""
    alarm = wake or stopping
    while not stopping.is_set():
        if wake is not None:
            wake.clear()
        try:
            ok = await sync()
        except Exception as exc:  # a bug must not stop the sharing for good
            log.error(f"{what} sync failed", exc_info=exc)
            ok = False
        pause = (interval() if callable(interval) else interval) if ok else retry_after
        if min_gap > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), min_gap)
            pause -= min_gap
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(alarm.wait(), max(pause, 0.0))


class ExchangeLoop:
    """`exchange_forever` as a task a store starts and stops, with a way to cut its pause short
    (`poke`) when the store has news for the other processes."""

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
            run = exchange_forever(
                self._sync,
                self._stopping,
                interval=self._interval,
                retry_after=self._retry_after,
                what=self._what,
                wake=self._wake,
                min_gap=self._min_gap,
            )
            self._task = asyncio.create_task(run, name=f"{self._what}-sync")

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
            task.cancel()
            await asyncio.wait({task})
