"""Token usage per user: the current budget period's total and the lifetime total.

Periods are `budget_period_days` long (the user's override, else the group's) and aligned to
the first charge: when one ends, the next starts at `start + k * period`, not at the moment of
the next request, so a user cannot shift their window by pausing.

Concurrent writers (workers, replicas) are safe without locks: the update is conditional on the
period start read before it (compare-and-set), an increment is done by the database
(`tokens = tokens + n`), and a lost race is retried. The lifetime total only ever grows; nothing
here, nor audit retention, resets it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from mindrouter.errors import InternalError, InvalidRequest, NotFound
from mindrouter.observability.logging import log
from mindrouter.stores.records import UsageCounters
from mindrouter.stores.sql.schema import groups, usage, users
from mindrouter.stores.sql.transactions import DATABASE_ERRORS, UNAVAILABLE, AnyRow, reading, utcnow

MAX_ATTEMPTS = 10

_STATE = (
    select(
        users.c.id,
        func.coalesce(users.c.budget_period_days, groups.c.budget_period_days).label("days"),
        usage.c.period_start,
        usage.c.period_tokens,
        usage.c.lifetime_tokens,
    )
    .select_from(users)
    .join(groups, users.c.group_id == groups.c.id)
    .outerjoin(usage, usage.c.user_id == users.c.id)
)


def current_period_start(start: datetime, days: int, now: datetime) -> datetime:
    """The start of the period containing `now`, for periods of `days` aligned to `start`."""
    period = timedelta(days=max(days, 1))
    if now < start + period:
        return start
    return start + period * ((now - start) // period)


def _counters(user_id: int, days: int, row: AnyRow, now: datetime) -> UsageCounters:
    if row.period_start is None:
        return UsageCounters(user_id=user_id, period_start=None, period_days=days)
    start = current_period_start(row.period_start, days, now)
    return UsageCounters(
        user_id=user_id,
        period_start=start,
        period_tokens=row.period_tokens if start == row.period_start else 0,
        lifetime_tokens=row.lifetime_tokens,
        period_days=days,
    )


async def _state(conn: AsyncConnection, user_id: int) -> AnyRow:
    row = (await conn.execute(_STATE.where(users.c.id == user_id))).first()
    if row is None:
        raise NotFound(f"no user with id {user_id}")
    return row


class SqlUsageStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def get_usage(self, user_id: int, now: datetime | None = None) -> UsageCounters:
        async with reading(self.engine) as conn:
            row = await _state(conn, user_id)
        return _counters(user_id, row.days, row, now or utcnow())

    async def add_usage(
        self, user_id: int, tokens: int, now: datetime, period_start: datetime | None = None
    ) -> UsageCounters:
        """Charge `tokens` at time `now`. `period_start` is where a user's first period began
        (the moment of their first admitted request); without it, `now`."""
        if tokens < 0:
            raise InvalidRequest("tokens must not be negative")
        for _ in range(MAX_ATTEMPTS):
            try:
                async with self.engine.begin() as conn:
                    done = await self._try_add(conn, user_id, tokens, now, period_start)
                    if done is not None:
                        return done
            except IntegrityError:
                continue  # another process created the row first: read it and add to it
            except DATABASE_ERRORS as exc:
                log.error("usage update failed", error=str(exc), user_id=user_id)
                raise InternalError(UNAVAILABLE) from exc
        raise InternalError("usage counters are too contended to update; try again")

    async def _try_add(
        self,
        conn: AsyncConnection,
        user_id: int,
        tokens: int,
        now: datetime,
        first_start: datetime | None = None,
    ) -> UsageCounters | None:
        """One attempt; None when another writer changed the period in between."""
        row = await _state(conn, user_id)
        days = row.days
        if row.period_start is None:
            start = first_start if first_start is not None and first_start <= now else now
            await conn.execute(
                insert(usage).values(
                    user_id=user_id,
                    period_start=start,
                    period_tokens=tokens,
                    lifetime_tokens=tokens,
                    updated_at=utcnow(),
                )
            )
            return UsageCounters(user_id, start, tokens, tokens, days)
        start = current_period_start(row.period_start, days, now)
        new_period = usage.c.period_tokens + tokens if start == row.period_start else tokens
        result = await conn.execute(
            update(usage)
            .where(usage.c.user_id == user_id, usage.c.period_start == row.period_start)
            .values(
                period_start=start,
                period_tokens=new_period,
                lifetime_tokens=usage.c.lifetime_tokens + tokens,
                updated_at=utcnow(),
            )
        )
        if result.rowcount != 1:
            return None
        after = await _state(conn, user_id)
        return _counters(user_id, days, after, now)
