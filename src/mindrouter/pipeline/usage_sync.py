"""Loads a user's period usage from the durable usage rows into the limit store.

The tokens a request used are charged to the database when its audit record is closed, in the
same transaction (`stores/sql/audit_close.py`), and to the limit counters when it settles; this
module only fills the counters from the database: the first time this process sees a user, and
again whenever the shared store says it no longer holds the user's usage (Redis restarted empty:
`UsageNotLoaded`), so a budget is never checked against counters that started again from zero;
with the usage go the user's admissions of the last minute and their requests in flight, read
from the audit trail, so the per-minute and concurrency limits hold across such a loss too.

A reload first waits (up to `CHARGES_WAIT_S`) for this process's audit outcomes still queued:
they carry charges that the lost counters held and the usage rows do not have yet, so reading
the rows at once would hand a user back the tokens of their last requests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from mindrouter.observability.logging import log
from mindrouter.stores.limits import Activity, LimitStore
from mindrouter.stores.ports import UsageLedger

# How long a reload waits for this process's queued charges to reach the usage rows.
CHARGES_WAIT_S = 2.0


def limit_key(user_id: int) -> str:
    return f"user:{user_id}"


class UsageSync:
    def __init__(
        self,
        ledger: UsageLedger,
        limits: LimitStore,
        charged: Callable[[float], Awaitable[bool]],
        wall: Callable[[], float] = time.time,
    ) -> None:
        """`charged(seconds)` waits, at most that long, until the charges this process has
        queued are in the ledger, and says whether they are (`AuditWriter.written`)."""
        self._ledger = ledger
        self._limits = limits
        self._charged = charged
        self._wall = wall
        self._seeded: set[int] = set()
        self._seeding: dict[int, asyncio.Future[None]] = {}
        self.reloads = 0  # loads after the limit store had lost a user's usage

    def seeded(self, user_id: int) -> bool:
        """Whether this process has loaded the user's usage (the common case, checked without
        a coroutine)."""
        return user_id in self._seeded

    async def ensure_seeded(self, user_id: int) -> None:
        # A first load needs no wait for charges: this process has served the user nothing yet.
        if user_id not in self._seeded:
            await self._load(user_id)

    async def reload(self, user_id: int) -> None:
        """The limit store lost the user's usage: load it again, whatever this process did,
        once the charges this process has queued are in the ledger."""
        self.reloads += 1
        if not await self._charged(CHARGES_WAIT_S):
            log.warning("usage reloaded before this process's last charges were written")
        await self._load(user_id)

    async def _load(self, user_id: int) -> None:
        # One load per user even when a burst of their requests arrives at once.
        task = self._seeding.get(user_id)
        if task is None:
            task = asyncio.ensure_future(self._seed(user_id))
            self._seeding[user_id] = task
            task.add_done_callback(lambda _: self._seeding.pop(user_id, None))
        await asyncio.shield(task)

    async def _seed(self, user_id: int) -> None:
        now = self._wall()
        counters = await self._ledger.get_usage(user_id)
        # A store that lost its data also rebuilds the user's last minute of admissions and
        # requests in flight from these (their limits would start from zero otherwise).
        admitted, in_flight = await self._ledger.recent_activity(
            user_id, datetime.fromtimestamp(now, UTC)
        )
        start = counters.period_start
        await self._limits.seed(
            limit_key(user_id),
            start.timestamp() if start is not None else None,
            counters.period_tokens,
            counters.lifetime_tokens,
            Activity(now, tuple(t.timestamp() for t in admitted), in_flight),
        )
        self._seeded.add(user_id)
