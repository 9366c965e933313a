"""Applying the YAML config's groups, users, backends and models to the database at start.

Idempotent and conservative: rows are upserted by name with the values the config gives; rows
the config does not list are left alone (they may have been made through the admin API), and
keys, usage counters, a user's active flag and limit overrides, and a row's `enabled` flag are
never touched. Several replicas starting at once may race; the loser of an insert retries and
then finds the row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from mindrouter.errors import InvalidRequest
from mindrouter.settings import ConfigError, Settings
from mindrouter.stores.records import LIMIT_FIELDS, GroupLimits
from mindrouter.stores.sql.epoch import bump_catalog_epoch, bump_epoch
from mindrouter.stores.sql.schema import backends, groups, models, users
from mindrouter.stores.sql.transactions import AnyRow, utcnow, writing

if TYPE_CHECKING:
    from mindrouter.stores.sql.bundle import SqlStores

DEFAULT_GROUP = "default"
ATTEMPTS = 3


@dataclass(slots=True)
class SyncReport:
    created: list[str] = field(default_factory=list)  # "group:students", "user:alice", ...
    updated: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated)


async def apply_config(stores: SqlStores, settings: Settings) -> SyncReport:
    for attempt in range(ATTEMPTS):
        report = SyncReport()
        try:
            async with writing(stores.engine) as conn:
                await _apply(conn, settings, report)
            return report
        except InvalidRequest as exc:
            # A unique name taken between our read and our insert: another replica won.
            if attempt + 1 < ATTEMPTS and isinstance(exc.__cause__, IntegrityError):
                continue
            raise
    raise AssertionError("unreachable")


async def _apply(conn: AsyncConnection, settings: Settings, report: SyncReport) -> None:
    limits_changed = False
    for g in settings.groups:
        values = {f: getattr(g, f) for f in LIMIT_FIELDS} | {"models": g.models}
        limits_changed |= await _upsert(
            conn, groups, name=g.name, values=values, what="group", report=report
        )
    group_ids = {r.name: r.id for r in await conn.execute(select(groups.c.name, groups.c.id))}
    for i, u in enumerate(settings.users):
        if u.group not in group_ids:
            if u.group != DEFAULT_GROUP:
                raise ConfigError(f"users[{i}] ({u.name}): unknown group {u.group!r}")
            values = {f: getattr(GroupLimits(), f) for f in LIMIT_FIELDS}
            await _upsert(
                conn, groups, name=DEFAULT_GROUP, values=values, what="group", report=report
            )
            group_ids[DEFAULT_GROUP] = await conn.scalar(
                select(groups.c.id).where(groups.c.name == DEFAULT_GROUP)
            )
        limits_changed |= await _upsert(
            conn,
            users,
            name=u.name,
            values={"group_id": group_ids[u.group]},
            what="user",
            report=report,
            on_create={"active": True},
        )
    for b in settings.backends:
        served = (
            None
            if b.models is None
            else [{"name": m.name, "upstream": m.upstream} for m in b.models]
        )
        values = {
            "engine": b.engine,
            "url": b.url,
            "gpu": b.gpu,
            "max_concurrent": b.max_concurrent,
            "priority": b.priority,
            "models": served,
        }
        await _upsert(
            conn,
            backends,
            name=b.name,
            values=values,
            what="backend",
            report=report,
            on_create={"enabled": True},
        )
    for m in settings.models:
        values = {
            "context_length": m.context_length,
            "capabilities": list(m.capabilities),
            "aliases": list(m.aliases),
        }
        await _upsert(
            conn,
            models,
            name=m.name,
            values=values,
            what="model",
            report=report,
            on_create={"enabled": True},
        )
    if limits_changed:
        await bump_epoch(conn)
    if report.changed:
        await bump_catalog_epoch(conn)


async def _upsert(
    conn: AsyncConnection,
    table: Table,
    *,
    name: str,
    values: dict[str, Any],
    what: str,
    report: SyncReport,
    on_create: dict[str, Any] | None = None,
) -> bool:
    """Inserts or updates the named row; True when an existing row changed."""
    now = utcnow()
    row = (await conn.execute(select(table).where(table.c.name == name))).first()
    if row is None:
        await conn.execute(
            insert(table).values(
                name=name, created_at=now, updated_at=now, **values, **(on_create or {})
            )
        )
        report.created.append(f"{what}:{name}")
        return False
    if not _differs(row, values):
        return False
    await conn.execute(update(table).where(table.c.id == row.id).values(updated_at=now, **values))
    report.updated.append(f"{what}:{name}")
    return True


def _differs(row: AnyRow, values: dict[str, Any]) -> bool:
    return any(getattr(row, column) != value for column, value in values.items())
