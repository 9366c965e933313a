"""Token usage per user: the current budget period's total and the lifetime total.

Periods are `budget_period_days` long (the user's override, else the group's) and aligned to
the first charge: when one ends, the next starts at `start + k * period`, not at the moment of
the next request, so a user cannot shift their window by pausing.

Concurrent writers (workers, replicas) are safe: the usage row is read with a row lock before
its period is checked, and the increment is done by the database (`tokens = tokens + n`). The
gateway charges usage in the same transaction that completes an audit record
(`charge_usage`), so the tokens of a record are counted exactly once, by whichever process
completes it. The lifetime total only ever grows; nothing here, nor audit retention, resets it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Insert, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from mindrouter.errors import InternalError, InvalidRequest, NotFound
from mindrouter.observability.logging import log
from mindrouter.stores.records import UsageCounters
from mindrouter.stores.sql.schema import audit_records, groups, usage, users
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


async def charge_usage(
    conn: AsyncConnection,
    user_id: int,
    tokens: int,
    now: datetime,
    first_start: datetime | None = None,
) -> bool:
    """Adds `tokens` to the user's usage inside the caller's transaction (so that a charge and
    what it is for commit together). False when the user no longer exists.

    The usage row is read with a row lock (PostgreSQL, MariaDB), so the period check and the
    update cannot interleave with another writer's; on SQLite the update is conditional on the
    period start read (compare-and-set) and read again if another writer moved it.
    """
    days = await period_days(conn, user_id)
    if days is None:
        return False
    locked = select(usage.c.period_start).where(usage.c.user_id == user_id).with_for_update()
    row = (await conn.execute(locked)).first()
    if row is None:
        start = first_start if first_start is not None and first_start <= now else now
        created = await conn.execute(
            _insert_if_missing(conn.dialect.name).values(
                user_id=user_id,
                period_start=start,
                period_tokens=tokens,
                lifetime_tokens=tokens,
                updated_at=utcnow(),
            )
        )
        if created.rowcount == 1:
            return True
        row = (await conn.execute(locked)).first()  # another writer created it just now
        assert row is not None
    for _ in range(MAX_ATTEMPTS):
        start = current_period_start(row.period_start, days, now)
        new_period = usage.c.period_tokens + tokens if start == row.period_start else tokens
        done = await conn.execute(
            update(usage)
            .where(usage.c.user_id == user_id, usage.c.period_start == row.period_start)
            .values(
                period_start=start,
                period_tokens=new_period,
                lifetime_tokens=usage.c.lifetime_tokens + tokens,
                updated_at=utcnow(),
            )
        )
        if done.rowcount == 1:
            return True
        # SQLite took no lock when reading: another writer moved the period meanwhile. This
        # transaction now holds the write lock, so the next read is current.
        row = (await conn.execute(locked)).first()
        assert row is not None
    raise InternalError("usage counters are too contended to update; try again")


_DAYS = (
    select(func.coalesce(users.c.budget_period_days, groups.c.budget_period_days))
    .select_from(users)
    .join(groups, users.c.group_id == groups.c.id)
)


async def period_days(conn: AsyncConnection, user_id: int) -> int | None:
    """The length of the user's budget periods in days; None when the user no longer exists."""
    days = (await conn.execute(_DAYS.where(users.c.id == user_id))).scalar()
    return None if days is None else int(days)


def _insert_if_missing(dialect: str) -> Insert:
    if dialect == "postgresql":
        return pg_insert(usage).on_conflict_do_nothing(index_elements=[usage.c.user_id])
    if dialect in ("mysql", "mariadb"):
        return insert(usage).prefix_with("IGNORE")
    return insert(usage).prefix_with("OR IGNORE")


class SqlUsageStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def get_usage(self, user_id: int, now: datetime | None = None) -> UsageCounters:
        async with reading(self.engine) as conn:
            row = await _state(conn, user_id)
        return _counters(user_id, row.days, row, now or utcnow())

    async def recent_activity(self, user_id: int, now: datetime) -> tuple[list[datetime], int]:
        """The admission times of the user's audit records of the last minute, and how many of
        their records are still `pending` (requests in flight)."""
        since = now - timedelta(seconds=60)
        async with reading(self.engine) as conn:
            recent = await conn.execute(
                select(audit_records.c.created_at).where(
                    audit_records.c.user_id == user_id, audit_records.c.created_at > since
                )
            )
            times = [t for (t,) in recent]
            pending = await conn.execute(
                select(func.count()).where(
                    audit_records.c.user_id == user_id,
                    audit_records.c.status == "pending",
                    audit_records.c.created_at > now - timedelta(days=1),
                )
            )
            return times, int(pending.scalar_one())

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
                    if not await charge_usage(conn, user_id, tokens, now, period_start):
                        raise NotFound(f"no user with id {user_id}")
                    after = await _state(conn, user_id)
                    return _counters(user_id, after.days, after, now)
            except DBAPIError as exc:
                if not _retryable(exc):
                    log.error("usage update failed", error=str(exc), user_id=user_id)
                    raise InternalError(UNAVAILABLE) from exc
            except DATABASE_ERRORS as exc:
                log.error("usage update failed", error=str(exc), user_id=user_id)
                raise InternalError(UNAVAILABLE) from exc
        raise InternalError("usage counters are too contended to update; try again")


def _retryable(exc: DBAPIError) -> bool:
    """A deadlock or lock wait the database resolved by failing one transaction."""
    text = str(exc.orig).lower()
    return "deadlock" in text or "lock wait" in text or "database is locked" in text
