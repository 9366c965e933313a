"""Reading the audit trail, and retention.

Retention blanks the content of old records (message history and output), keeping the row, its
token counts and timings, so reports over old periods still add up. Usage counters live in
their own table and are never touched here: a user's lifetime total survives any purge.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, false, null, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from mindrouter.bounds import as_row_id
from mindrouter.errors import InvalidRequest
from mindrouter.identity.keys import KEY_SCHEME, is_display_prefix
from mindrouter.stores.audit_records import AuditEntry, AuditFilter
from mindrouter.stores.sql.schema import audit_records, users
from mindrouter.stores.sql.transactions import AnyRow, reading, utcnow, writing

MAX_LIMIT = 1000
PURGE_BATCH = 2000


def audit_entry(row: AnyRow) -> AuditEntry:
    return AuditEntry(
        id=row.id,
        uuid=row.uuid,
        request_id=row.request_id,
        created_at=row.created_at,
        user_id=row.user_id,
        user_name=row.user_name,
        key_id=row.key_id,
        key_prefix=row.key_prefix,
        model=row.model,
        endpoint=row.endpoint,
        messages=row.messages,
        stream=bool(row.stream),
        client_ip=row.client_ip,
        user_agent=row.user_agent,
        status=row.status,
        output=row.output,
        error_message=row.error_message,
        input_tokens=row.input_tokens,
        output_tokens=row.output_tokens,
        backend=row.backend,
        attempts=row.attempts,
        queued_ms=row.queued_ms,
        first_token_ms=row.first_token_ms,
        total_ms=row.total_ms,
        completed_at=row.completed_at,
        purged=bool(row.purged),
    )


def _key_clause(key: str) -> ColumnElement[bool]:
    if key.isascii() and key.isdigit():
        key_id = as_row_id(key)
        return audit_records.c.key_id == key_id if key_id is not None else false()
    if is_display_prefix(key):
        return audit_records.c.key_prefix == key
    if key.startswith(KEY_SCHEME):
        raise InvalidRequest("filter by a key's id or prefix, never the full key", param="key")
    raise InvalidRequest("key must be a key id or a prefix (mr2_ + 8 characters)", param="key")


class SqlAuditLog:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def get(self, uuid: str) -> AuditEntry | None:
        async with reading(self.engine) as conn:
            row = (
                await conn.execute(select(audit_records).where(audit_records.c.uuid == uuid))
            ).first()
        return None if row is None else audit_entry(row)

    async def query(self, where: AuditFilter) -> list[AuditEntry]:
        """Newest first. `user` matches the name recorded at the time or the id of the user who
        has that name now (so a renamed or deleted user's records are still found); `key` is a
        key id or prefix."""
        if not 1 <= where.limit <= MAX_LIMIT:
            raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}", param="limit")
        t = audit_records.c
        query = select(audit_records).order_by(t.created_at.desc(), t.id.desc())
        async with reading(self.engine) as conn:
            if where.user is not None:
                uid = await conn.scalar(select(users.c.id).where(users.c.name == where.user))
                by_name = t.user_name == where.user
                query = query.where(by_name if uid is None else or_(by_name, t.user_id == uid))
            if where.key is not None:
                query = query.where(_key_clause(where.key))
            if where.model is not None:
                query = query.where(t.model == where.model)
            if where.status is not None:
                query = query.where(t.status == where.status)
            if where.since is not None:
                query = query.where(t.created_at >= where.since)
            if where.until is not None:
                query = query.where(t.created_at < where.until)
            rows = await conn.execute(query.limit(where.limit))
            return [audit_entry(r) for r in rows]

    async def purge_audit(
        self, older_than_days: int, *, now: datetime | None = None, batch: int = PURGE_BATCH
    ) -> int:
        """Blanks messages and output of records created more than `older_than_days` ago;
        returns how many records were purged. One transaction per `batch` records, so a first
        purge of a long history never holds the audit writer back for long."""
        if older_than_days < 0:
            raise InvalidRequest("older_than_days must not be negative")
        cutoff = (now or utcnow()) - timedelta(days=older_than_days)
        t = audit_records.c
        purged = 0
        while True:
            async with writing(self.engine) as conn:
                # Ids first: MariaDB refuses LIMIT inside an IN subquery.
                ids = (
                    await conn.scalars(
                        select(t.id)
                        .where(t.created_at < cutoff, t.purged.is_(False))
                        .order_by(t.id)
                        .limit(batch)
                    )
                ).all()
                if not ids:
                    return purged
                await conn.execute(
                    update(audit_records)
                    .where(t.id.in_(ids))
                    .values(messages=null(), output=None, purged=True)
                )
            purged += len(ids)
