"""Usage summaries read from the audit trail: the console's charts and tables, and the CSV
export for chargeback.

Every summary is one grouped query over `audit_records`, with the dimensions to group by chosen
by the caller (user, group, model, day). The group is the user's group now (records carry the
user, not the group they were in). A new dimension (an account, a project) is one more entry in
`_dimension` and one more field of `UsageRow`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, desc, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from mindrouter.stores.audit_records import AuditEntry
from mindrouter.stores.sql.audit_log import audit_entry
from mindrouter.stores.sql.schema import audit_records, groups, users
from mindrouter.stores.sql.transactions import reading

Dimension = Literal["user", "group", "model", "day"]
DIMENSIONS: tuple[Dimension, ...] = ("user", "group", "model", "day")


@dataclass(frozen=True, slots=True)
class UsageScope:
    """Which records a summary covers: one user's (by id) or everyone's, in [since, until)."""

    user_id: int | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True, slots=True)
class UsageRow:
    user: str | None = None
    group: str | None = None
    model: str | None = None
    day: date | None = None
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def _day(dialect: str) -> ColumnElement[Any]:
    """The UTC calendar day of a record, as 'YYYY-MM-DD' (times are stored as naive UTC)."""
    t = audit_records.c.created_at
    if dialect == "postgresql":
        return func.to_char(t, "YYYY-MM-DD")
    if dialect in ("mysql", "mariadb"):
        return func.date_format(t, "%Y-%m-%d")
    return func.strftime("%Y-%m-%d", t)


def _dimension(name: Dimension, dialect: str) -> ColumnElement[Any]:
    if name == "user":
        return audit_records.c.user_name
    if name == "group":
        return groups.c.name
    if name == "model":
        return audit_records.c.model
    return _day(dialect)


class SqlReports:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def usage(self, scope: UsageScope, by: Sequence[Dimension]) -> list[UsageRow]:
        """Requests and tokens per combination of `by`, ordered by those dimensions."""
        t = audit_records.c
        async with reading(self.engine) as conn:
            dialect = conn.dialect.name
            keys = [_dimension(d, dialect).label(d) for d in by]
            query = (
                select(
                    *keys,
                    func.count().label("requests"),
                    func.coalesce(func.sum(t.input_tokens), 0).label("input_tokens"),
                    func.coalesce(func.sum(t.output_tokens), 0).label("output_tokens"),
                )
                .select_from(audit_records)
                .outerjoin(users, users.c.id == t.user_id)
                .outerjoin(groups, groups.c.id == users.c.group_id)
            )
            if scope.user_id is not None:
                query = query.where(t.user_id == scope.user_id)
            if scope.since is not None:
                query = query.where(t.created_at >= scope.since)
            if scope.until is not None:
                query = query.where(t.created_at < scope.until)
            if keys:
                query = query.group_by(*keys).order_by(*keys)
            rows = (await conn.execute(query)).all()
        out = []
        for row in rows:
            values = {d: getattr(row, d) for d in by}
            if values.get("day") is not None:
                values["day"] = date.fromisoformat(str(values["day"]))
            out.append(
                UsageRow(
                    **values,
                    requests=int(row.requests),
                    input_tokens=int(row.input_tokens),
                    output_tokens=int(row.output_tokens),
                )
            )
        return out

    async def recent(self, user_id: int, limit: int = 50) -> list[AuditEntry]:
        """The user's newest records (by the user's id: a later user of the same name never
        sees an earlier one's)."""
        t = audit_records.c
        query = (
            select(audit_records)
            .where(t.user_id == user_id)
            .order_by(desc(t.created_at), desc(t.id))
            .limit(limit)
        )
        async with reading(self.engine) as conn:
            return [audit_entry(r) for r in await conn.execute(query)]

    async def mean_durations(self, since: datetime) -> dict[str, float]:
        """Seconds a successful request took on average, per model, since `since`."""
        t = audit_records.c
        query = (
            select(t.model, func.avg(t.total_ms).label("ms"))
            .where(t.created_at >= since, t.status == "ok", t.total_ms.is_not(None))
            .group_by(t.model)
        )
        async with reading(self.engine) as conn:
            rows = (await conn.execute(query)).all()
        return {r.model: float(r.ms) / 1000.0 for r in rows if r.ms is not None}
