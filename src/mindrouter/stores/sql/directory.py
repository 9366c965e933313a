"""Groups and users: who may use the gateway, and with which limits.

Every change that can alter a cached principal (limits, group membership, the active flag, a
rename, a deletion) bumps the auth epoch in the same transaction.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from mindrouter.errors import InvalidRequest, NotFound
from mindrouter.stores.records import (
    LIMIT_FIELDS,
    Group,
    GroupChanges,
    GroupLimits,
    LimitOverrides,
    User,
    UserChanges,
)
from mindrouter.stores.sql.checks import check_limits, refuse_nulls
from mindrouter.stores.sql.epoch import bump_catalog_epoch, bump_epoch
from mindrouter.stores.sql.schema import groups, users
from mindrouter.stores.sql.transactions import AnyRow, reading, utcnow, writing


def group_from_row(row: AnyRow) -> Group:
    return Group(
        id=row.id,
        name=row.name,
        limits=GroupLimits(
            scheduler_weight=row.scheduler_weight,
            token_budget=row.token_budget,
            rpm=row.rpm,
            max_concurrent=row.max_concurrent,
            budget_period_days=row.budget_period_days,
        ),
        created_at=row.created_at,
        updated_at=row.updated_at,
        models=row.models,
    )


def _user_from_row(row: AnyRow) -> User:
    return User(
        id=row.id,
        name=row.name,
        group=row.group_name,
        active=bool(row.active),
        overrides=LimitOverrides(**{f: getattr(row, f) for f in LIMIT_FIELDS}),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


_USER_COLUMNS = select(users, groups.c.name.label("group_name")).join(
    groups, users.c.group_id == groups.c.id
)


async def group_id(conn: AsyncConnection, name: str) -> int:
    found = await conn.scalar(select(groups.c.id).where(groups.c.name == name))
    if found is None:
        raise NotFound(f"no group named {name!r}")
    return int(found)


async def user_id(conn: AsyncConnection, name: str) -> int:
    found = await conn.scalar(select(users.c.id).where(users.c.name == name))
    if found is None:
        raise NotFound(f"no user named {name!r}")
    return int(found)


class SqlDirectory:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    # -- groups --------------------------------------------------------------------------------

    async def list_groups(self) -> list[Group]:
        async with reading(self.engine) as conn:
            rows = await conn.execute(select(groups).order_by(groups.c.name))
            return [group_from_row(r) for r in rows]

    async def get_group(self, name: str) -> Group:
        async with reading(self.engine) as conn:
            row = (await conn.execute(select(groups).where(groups.c.name == name))).first()
        if row is None:
            raise NotFound(f"no group named {name!r}")
        return group_from_row(row)

    async def create_group(
        self, name: str, limits: GroupLimits | None = None, models: list[str] | None = None
    ) -> Group:
        values = limit_values(limits or GroupLimits())
        check_limits(values)
        now = utcnow()
        async with writing(self.engine, f"a group named {name!r} already exists") as conn:
            await conn.execute(
                insert(groups).values(
                    name=name, created_at=now, updated_at=now, models=models, **values
                )
            )
            await bump_catalog_epoch(conn)
        return await self.get_group(name)

    async def update_group(self, name: str, changes: GroupChanges) -> Group:
        values: dict[str, Any] = dict(changes)
        # null models is "every model"; the limits cannot be null.
        models = {"models": values.pop("models")} if "models" in values else {}
        refuse_nulls(values)
        check_limits(values)
        values |= models
        new_name = values.get("name", name)
        async with writing(self.engine, f"a group named {new_name!r} already exists") as conn:
            gid = await group_id(conn, name)
            if values:
                values["updated_at"] = utcnow()
                await conn.execute(update(groups).where(groups.c.id == gid).values(**values))
                await bump_epoch(conn)
                await bump_catalog_epoch(conn)
        return await self.get_group(new_name)

    async def delete_group(self, name: str) -> None:
        async with writing(self.engine) as conn:
            gid = await group_id(conn, name)
            members = await conn.scalar(
                select(func.count()).select_from(users).where(users.c.group_id == gid)
            )
            if members:
                raise InvalidRequest(
                    f"group {name!r} still has {members} user(s); move or delete them first"
                )
            await conn.execute(delete(groups).where(groups.c.id == gid))

    # -- users ---------------------------------------------------------------------------------

    async def list_users(self, group: str | None = None) -> list[User]:
        query = _USER_COLUMNS.order_by(users.c.name)
        if group is not None:
            query = query.where(groups.c.name == group)
        async with reading(self.engine) as conn:
            return [_user_from_row(r) for r in await conn.execute(query)]

    async def get_user(self, name: str) -> User:
        async with reading(self.engine) as conn:
            row = (await conn.execute(_USER_COLUMNS.where(users.c.name == name))).first()
        if row is None:
            raise NotFound(f"no user named {name!r}")
        return _user_from_row(row)

    async def create_user(
        self,
        name: str,
        group: str,
        *,
        active: bool = True,
        overrides: LimitOverrides | None = None,
    ) -> User:
        values = limit_values(overrides or LimitOverrides())
        check_limits(values)
        now = utcnow()
        async with writing(self.engine, f"a user named {name!r} already exists") as conn:
            gid = await group_id(conn, group)
            await conn.execute(
                insert(users).values(
                    name=name,
                    group_id=gid,
                    active=active,
                    created_at=now,
                    updated_at=now,
                    **values,
                )
            )
        return await self.get_user(name)

    async def update_user(self, name: str, changes: UserChanges) -> User:
        values: dict[str, Any] = dict(changes)
        refuse_nulls(values, nullable=LIMIT_FIELDS)
        check_limits(values)
        new_name = values.get("name", name)
        async with writing(self.engine, f"a user named {new_name!r} already exists") as conn:
            uid = await user_id(conn, name)
            if "group" in values:
                values["group_id"] = await group_id(conn, values.pop("group"))
            if values:
                values["updated_at"] = utcnow()
                await conn.execute(update(users).where(users.c.id == uid).values(**values))
                await bump_epoch(conn)
        return await self.get_user(new_name)

    async def delete_user(self, name: str) -> None:
        """Deletes the user with their keys and usage counters; audit records keep their name."""
        async with writing(self.engine) as conn:
            uid = await user_id(conn, name)
            await conn.execute(delete(users).where(users.c.id == uid))
            await bump_epoch(conn)


def limit_values(limits: GroupLimits | LimitOverrides) -> dict[str, Any]:
    return {f: getattr(limits, f) for f in LIMIT_FIELDS}
