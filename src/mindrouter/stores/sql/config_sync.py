"""Applying the YAML config's groups, users, backends and models to the database: at
`migrate`, at every start and on SIGHUP.

The file is the desired state for what it lists: rows are upserted by name with the values it
gives, and every value that differed (one an admin changed through the API or the CLI since) is
reported with both sides before it is overwritten. Rows the file does not list are left alone
and reported as such (they were made through the admin API); keys, usage counters, a user's
active flag and limit overrides, and a row's `enabled` flag are the database's alone and never
touched. Several replicas starting at once may race; the loser of an insert retries and then
finds the row.
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
from mindrouter.stores.sql.catalog import stored_values
from mindrouter.stores.sql.epoch import bump_catalog_epoch, bump_epoch
from mindrouter.stores.sql.schema import backends, groups, models, users
from mindrouter.stores.sql.transactions import utcnow, writing

if TYPE_CHECKING:
    from mindrouter.stores.sql.bundle import SqlStores

DEFAULT_GROUP = "default"
ATTEMPTS = 3


@dataclass(slots=True)
class SyncReport:
    created: list[str] = field(default_factory=list)  # "group:students", "user:alice", ...
    updated: list[str] = field(default_factory=list)
    # "backend:gpu-1 max_concurrent: 16 in the database, 8 in the file (the file's applied)"
    differences: list[str] = field(default_factory=list)
    # "backend:lab-box": rows of groups, backends and models the file does not list
    only_in_database: list[str] = field(default_factory=list)

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
        values = stored_values(b)
        del values["enabled"]  # the database's alone
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
    for table, what, listed in (
        (groups, "group", {g.name for g in settings.groups} | {DEFAULT_GROUP}),
        (backends, "backend", {b.name for b in settings.backends}),
        (models, "model", {m.name for m in settings.models}),
    ):
        names = (await conn.execute(select(table.c.name).order_by(table.c.name))).scalars()
        report.only_in_database += [f"{what}:{n}" for n in names if n not in listed]
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
    differing = [column for column, value in values.items() if getattr(row, column) != value]
    if not differing:
        return False
    report.differences += [
        f"{what}:{name} {column}: {getattr(row, column)!r} in the database, "
        f"{values[column]!r} in the file (the file's applied)"
        for column in differing
    ]
    await conn.execute(update(table).where(table.c.id == row.id).values(updated_at=now, **values))
    report.updated.append(f"{what}:{name}")
    return True
