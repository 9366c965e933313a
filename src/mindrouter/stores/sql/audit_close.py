"""Closing audit records, and charging their tokens to the user's usage in the same transaction.

A record is closed exactly once, by whoever closes it first: the process that served the request
(`close_records`, the audit writer's completion batches; on PostgreSQL the same in one statement,
`audit_pg.PgAuditConnection.complete`) or, when that process died, a sweeper in another one
(`interrupt_records`). Both update only rows still `pending`, and charge only the
rows they did close, so a record's tokens are counted once however the two race. The usage
charge and the record's final status commit together: a process killed at any moment leaves
either a closed record with its tokens charged, or a `pending` one that a sweeper closes.

Rows are locked before they are read (PostgreSQL, MariaDB), so a concurrent closer waits and
then finds them closed. SQLite takes no row locks; its single writer fails a transaction whose
read became stale before it wrote, and the batch is tried again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from mindrouter.stores.records import Charge
from mindrouter.stores.sql.schema import audit_records
from mindrouter.stores.sql.usage import charge_usage, period_days

# The outcome columns an audit completion sets (`b_`-prefixed bound parameters).
OUTCOME_COLUMNS = (
    "status",
    "output",
    "input_tokens",
    "output_tokens",
    "error_message",
    "backend",
    "attempts",
    "queued_ms",
    "first_token_ms",
    "total_ms",
    "completed_at",
)
INTERRUPTED = "interrupted"
# Bound parameter names must differ from column names in an UPDATE's SET clause.
_COMPLETE = (
    update(audit_records)
    .where(audit_records.c.uuid == bindparam("b_uuid"), audit_records.c.status == "pending")
    .values({name: bindparam(f"b_{name}") for name in OUTCOME_COLUMNS})
)
_PARAMS = ("b_uuid", *(f"b_{name}" for name in OUTCOME_COLUMNS))


async def _pending_users(conn: AsyncConnection, uuids: Sequence[str]) -> dict[str, int | None]:
    rows = await conn.execute(
        select(audit_records.c.uuid, audit_records.c.user_id)
        .where(audit_records.c.uuid.in_(uuids), audit_records.c.status == "pending")
        .with_for_update()
    )
    return {row.uuid: row.user_id for row in rows}


async def _charge_all(
    conn: AsyncConnection, by_user: dict[int, tuple[int, datetime, datetime | None]]
) -> list[Charge]:
    charges = []
    # Always in the same order, so two closers charging the same users cannot deadlock.
    for user_id in sorted(by_user):
        tokens, at, start = by_user[user_id]
        if await charge_usage(conn, user_id, tokens, at, start):
            charges.append(Charge(user_id, tokens, at, start, 0))
    return charges


def _add(
    by_user: dict[int, tuple[int, datetime, datetime | None]],
    user_id: int,
    tokens: int,
    at: datetime,
    start: datetime | None,
) -> None:
    before = by_user.get(user_id)
    if before is None:
        by_user[user_id] = (tokens, at, start)
        return
    first = min((s for s in (before[2], start) if s is not None), default=None)
    by_user[user_id] = (before[0] + tokens, max(before[1], at), first)


async def close_records(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> list[Charge]:
    """Completes the records of `rows` (the writer's outcome parameters) that are still
    `pending` and charges their tokens, inside the caller's transaction."""
    owners = await _pending_users(conn, [row["b_uuid"] for row in rows])
    todo = [row for row in rows if row["b_uuid"] in owners]
    if not todo:
        return []
    await conn.execute(_COMPLETE, [{k: row[k] for k in _PARAMS} for row in todo])
    by_user: dict[int, tuple[int, datetime, datetime | None]] = {}
    for row in todo:
        user_id = owners[row["b_uuid"]]
        tokens = (row["b_input_tokens"] or 0) + (row["b_output_tokens"] or 0)
        if user_id is not None and tokens > 0:
            _add(by_user, user_id, tokens, row["b_completed_at"], row["b_period_start"])
    return await _charge_all(conn, by_user)


async def interrupt_records(
    conn: AsyncConnection, instance_id: str, now: datetime, limit: int
) -> tuple[int, int, list[Charge]]:
    """Closes up to `limit` records the dead process `instance_id` left `pending` as
    `interrupted`, charging the tokens of their last checkpoint; returns how many it found,
    how many it closed, and the charges."""
    found = await conn.execute(
        select(
            audit_records.c.uuid,
            audit_records.c.user_id,
            audit_records.c.created_at,
            audit_records.c.input_tokens,
            audit_records.c.output_tokens,
        )
        .where(audit_records.c.instance_id == instance_id, audit_records.c.status == "pending")
        .order_by(audit_records.c.id)
        .limit(limit)
        .with_for_update()
    )
    rows = found.all()
    closed = 0
    by_user: dict[int, tuple[int, datetime, datetime | None]] = {}
    message = (
        f"the gateway process serving this request (instance {instance_id}) stopped before it "
        "ended; the tokens of its last checkpoint were charged"
    )
    for row in rows:
        done = await conn.execute(
            update(audit_records)
            .where(audit_records.c.uuid == row.uuid, audit_records.c.status == "pending")
            .values(status=INTERRUPTED, error_message=message, completed_at=now)
        )
        if done.rowcount != 1:
            continue  # closed meanwhile by someone else: theirs to charge
        closed += 1
        tokens = (row.input_tokens or 0) + (row.output_tokens or 0)
        if row.user_id is not None and tokens > 0:
            _add(by_user, row.user_id, tokens, now, row.created_at)
    charges = []
    for charge in await _charge_all(conn, by_user):
        days = await period_days(conn, charge.user_id)
        charges.append(replace(charge, period_days=days or 1))
    return len(rows), closed, charges
