"""A batch of audit outcomes closes the records still `pending` and charges their users, in one
transaction, alike on every database (on PostgreSQL one statement, `audit_pg.complete`; on the
others `audit_close.close_records`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from mindrouter.pipeline.usage_sync import UsageSync, limit_key
from mindrouter.stores.audit_records import AuditOutcome
from mindrouter.stores.limits import Limits, MemoryLimitStore
from mindrouter.stores.records import GroupLimits, LimitOverrides
from mindrouter.stores.sql import SqlStores
from mindrouter.stores.sql.schema import audit_records, usage
from mindrouter.stores.sql.usage import current_period_start

from .conftest import unique
from .test_audit import start

T0 = datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


async def make_user(stores: SqlStores, days: int = 7) -> tuple[int, str]:
    group = unique("g")
    await stores.directory.create_group(group, GroupLimits(budget_period_days=30))
    name = unique("u")
    user = await stores.directory.create_user(
        name, group, overrides=LimitOverrides(budget_period_days=days)
    )
    return user.id, name


async def begin(stores: SqlStores, user_id: int, name: str) -> str:
    record = start(name, user_id=user_id)
    await stores.audit.begin(record)
    return record.uuid


def outcome(tokens: tuple[int, int], at: datetime, first: datetime | None = None) -> AuditOutcome:
    return AuditOutcome(
        status="ok",
        output="hi",
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        backend="gpu1",
        attempts=1,
        queued_ms=1.5,
        first_token_ms=20.25,
        total_ms=80.0,
        completed_at=at,
        period_start=first,
    )


async def test_a_batch_closes_its_records_and_charges_each_user_once(stores: SqlStores) -> None:
    alice, alice_name = await make_user(stores)
    bob, bob_name = await make_user(stores)
    mine = [await begin(stores, alice, alice_name) for _ in range(3)]
    theirs = await begin(stores, bob, bob_name)
    nobody = start(unique("anon"))  # a record without a user (a key of a deleted user, say)
    await stores.audit.begin(nobody)
    for i, uuid in enumerate(mine):
        stores.audit.complete(uuid, outcome((10, i), T0 + timedelta(minutes=i), first=T0))
    stores.audit.complete(theirs, outcome((5, 5), T0, first=T0 + timedelta(hours=1)))
    stores.audit.complete(nobody.uuid, outcome((7, 7), T0))
    await stores.audit.flush()

    seen = await stores.audit_log.get(mine[2])
    assert seen is not None
    assert (seen.status, seen.output, seen.input_tokens, seen.output_tokens) == ("ok", "hi", 10, 2)
    assert (seen.backend, seen.attempts, seen.queued_ms, seen.total_ms) == ("gpu1", 1, 1.5, 80.0)
    assert seen.completed_at == T0 + timedelta(minutes=2)
    got = await stores.usage.get_usage(alice, T0 + timedelta(hours=1))
    assert (got.period_start, got.period_tokens, got.lifetime_tokens) == (T0, 33, 33)
    # A first period that would start after the charge starts at the charge.
    got = await stores.usage.get_usage(bob, T0 + timedelta(hours=1))
    assert (got.period_start, got.period_tokens, got.lifetime_tokens) == (T0, 10, 10)
    assert stores.audit.stats.completed == 5
    if stores.engine.url.get_backend_name() == "postgresql":
        assert stores.audit.outcomes_pg is not None  # the one-statement way was taken


async def test_a_record_closed_first_by_someone_else_is_neither_changed_nor_charged(
    stores: SqlStores,
) -> None:
    uid, name = await make_user(stores)
    swept, served = await begin(stores, uid, name), await begin(stores, uid, name)
    async with stores.engine.begin() as conn:  # a sweeper closed it meanwhile
        await conn.execute(
            update(audit_records)
            .where(audit_records.c.uuid == swept)
            .values(status="interrupted", output_tokens=3)
        )
    stores.audit.complete(swept, outcome((100, 100), T0))
    stores.audit.complete(served, outcome((1, 2), T0))
    await stores.audit.flush()
    seen = await stores.audit_log.get(swept)
    assert seen is not None and (seen.status, seen.output_tokens) == ("interrupted", 3)
    got = await stores.usage.get_usage(uid, T0)
    assert (got.period_tokens, got.lifetime_tokens) == (3, 3)
    # The same outcome again (a batch sent twice after a lost reply) charges nothing more.
    stores.audit.complete(served, outcome((1, 2), T0))
    await stores.audit.flush()
    assert (await stores.usage.get_usage(uid, T0)).lifetime_tokens == 3


async def test_the_record_of_a_deleted_user_is_closed_and_nobody_is_charged(
    stores: SqlStores,
) -> None:
    uid, name = await make_user(stores)
    kept_id, kept_name = await make_user(stores)
    gone, kept = await begin(stores, uid, name), await begin(stores, kept_id, kept_name)
    await stores.directory.delete_user(name)
    stores.audit.complete(gone, outcome((4, 4), T0))
    stores.audit.complete(kept, outcome((1, 1), T0))
    await stores.audit.flush()
    seen = await stores.audit_log.get(gone)
    assert seen is not None and seen.status == "ok"
    assert (await stores.usage.get_usage(kept_id, T0)).lifetime_tokens == 2


@pytest.mark.parametrize(
    "later",
    [
        timedelta(0),
        timedelta(days=7) - timedelta(microseconds=1),  # the last moment of the first period
        timedelta(days=7),  # the first moment of the second
        timedelta(days=23, hours=5),
        timedelta(days=700, microseconds=7),
        -timedelta(hours=1),  # a clock behind the period's start
    ],
    ids=["same", "last-moment", "next-period", "third-period", "years", "behind"],
)
async def test_the_period_moves_as_the_usage_module_says(
    stores: SqlStores, later: timedelta
) -> None:
    uid, name = await make_user(stores, days=7)
    first, second = await begin(stores, uid, name), await begin(stores, uid, name)
    stores.audit.complete(first, outcome((50, 50), T0, first=T0))
    await stores.audit.flush()
    at = T0 + later
    stores.audit.complete(second, outcome((3, 4), at, first=at))
    await stores.audit.flush()
    expected_start = current_period_start(T0, 7, at)
    async with stores.engine.connect() as conn:
        row = (await conn.execute(usage.select().where(usage.c.user_id == uid))).one()
    assert row.period_start == expected_start
    assert row.period_tokens == (107 if expected_start == T0 else 7)
    assert row.lifetime_tokens == 107


async def test_written_waits_for_the_queued_outcomes_without_the_gathering_pause(
    stores: SqlStores,
) -> None:
    uid, name = await make_user(stores)
    stores.audit.complete_delay = 60.0  # gathered for a minute, unless someone waits
    uuid = await begin(stores, uid, name)
    stores.audit.complete(uuid, outcome((4, 6), T0, first=T0))
    assert (await stores.usage.get_usage(uid, T0)).lifetime_tokens == 0
    assert await stores.audit.written(30.0)
    assert (await stores.usage.get_usage(uid, T0)).lifetime_tokens == 10
    assert await stores.audit.written(0.0), "nothing queued: at once"


async def test_a_reload_after_redis_lost_the_usage_counts_the_charges_still_queued(
    stores: SqlStores,
) -> None:
    """The lost counters held the user's last requests; their outcomes, still gathered in the
    writer, are what the usage rows lack: the reload waits for them instead of handing the
    user those tokens back."""
    uid, name = await make_user(stores, days=30)
    stores.audit.complete_delay = 60.0
    now = datetime.now(UTC)
    uuid = await begin(stores, uid, name)
    stores.audit.complete(uuid, outcome((30, 70), now, first=now))
    limits = MemoryLimitStore()
    usage = UsageSync(stores.usage, limits, stores.audit.written)
    await usage.reload(uid)
    seen = await limits.snapshot(limit_key(uid), Limits(1000, 0, 0, 30), now.timestamp())
    assert (seen.period_tokens, seen.lifetime_tokens) == (100, 100)
