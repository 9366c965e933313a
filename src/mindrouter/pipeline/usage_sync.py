"""Between the fast limit counters and the durable usage rows.

Period usage is loaded into the limit store the first time a user is seen by this process (so a
restart keeps it), and the tokens charged are written back as additive deltas in batches: at
least every `interval` seconds and at shutdown. Deltas add up correctly however many processes
report, and `lifetime_tokens_used` only ever grows.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Protocol

from mindrouter.errors import NotFound
from mindrouter.observability.logging import log
from mindrouter.stores.limits import LimitStore
from mindrouter.stores.records import UsageCounters


class UsageLedger(Protocol):
    async def add_usage(
        self, user_id: int, tokens: int, now: datetime, period_start: datetime | None = None
    ) -> UsageCounters: ...

    async def get_usage(self, user_id: int, now: datetime | None = None) -> UsageCounters: ...


def limit_key(user_id: int) -> str:
    return f"user:{user_id}"


class UsageSync:
    def __init__(self, ledger: UsageLedger, limits: LimitStore, interval: float = 30.0) -> None:
        self._ledger = ledger
        self._limits = limits
        self._interval = interval
        self._seeded: set[int] = set()
        self._seeding: dict[int, asyncio.Future[None]] = {}
        # (user, period start) -> [tokens, time of the last charge]: charges of different periods
        # stay apart, so each lands in its own period in the database.
        self._pending: dict[tuple[int, float], list[float]] = {}
        self._task: asyncio.Task[None] | None = None

    async def ensure_seeded(self, user_id: int) -> None:
        if user_id in self._seeded:
            return
        # One load per user even when a burst of their first requests arrives at once.
        task = self._seeding.get(user_id)
        if task is None:
            task = asyncio.ensure_future(self._seed(user_id))
            self._seeding[user_id] = task
            task.add_done_callback(lambda _: self._seeding.pop(user_id, None))
        await asyncio.shield(task)

    async def _seed(self, user_id: int) -> None:
        counters = await self._ledger.get_usage(user_id)
        if counters.period_start is not None:
            await self._limits.seed(
                limit_key(user_id),
                counters.period_start.timestamp(),
                counters.period_tokens,
                counters.lifetime_tokens,
            )
        self._seeded.add(user_id)

    def record(self, user_id: int, tokens: int, charged_at: float, period_start: float) -> None:
        if tokens > 0:
            entry = self._pending.setdefault((user_id, period_start), [0, charged_at])
            entry[0] += tokens
            entry[1] = max(entry[1], charged_at)

    async def flush(self) -> None:
        pending, self._pending = self._pending, {}
        for (user_id, start), (tokens, charged_at) in sorted(pending.items()):
            try:
                await self._ledger.add_usage(
                    user_id,
                    int(tokens),
                    datetime.fromtimestamp(charged_at, UTC),
                    datetime.fromtimestamp(start, UTC),
                )
            except NotFound:
                # The user was deleted (their usage row with them): there is nothing left to
                # charge, and retrying would fail, and log, every round until a restart.
                self._seeded.discard(user_id)
                log.warning("usage of a deleted user dropped", user_id=user_id, tokens=tokens)
            except Exception as exc:
                # Keep the tokens for the next round rather than lose them.
                entry = self._pending.setdefault((user_id, start), [0, charged_at])
                entry[0] += tokens
                log.error("usage flush failed", user_id=user_id, tokens=tokens, error=str(exc))

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.flush()
