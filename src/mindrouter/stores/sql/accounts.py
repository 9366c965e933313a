"""Console accounts: who may sign in to the web console, and how.

A console account belongs to a user (the row is deleted with them). It holds an Argon2 password
hash for local sign-in, the OpenID Connect subject (`issuer|sub`) for single sign-on, and the
console's admin flag. The console reads the account with its user on every page, so a user
deactivated or demoted by an administrator loses access at their next click.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from mindrouter.errors import NotFound
from mindrouter.stores.sql.directory import user_id
from mindrouter.stores.sql.schema import console_accounts, groups, users
from mindrouter.stores.sql.transactions import AnyRow, reading, utcnow, writing


@dataclass(frozen=True, slots=True)
class ConsoleAccount:
    user_id: int
    user_name: str
    group: str
    active: bool
    is_admin: bool
    password_hash: str | None
    oidc_subject: str | None

    @property
    def has_sign_in(self) -> bool:
        """Whether the console knows a way for this user to sign in."""
        return self.password_hash is not None or self.oidc_subject is not None


_ACCOUNT = (
    select(
        users.c.id.label("user_id"),
        users.c.name.label("user_name"),
        users.c.active,
        groups.c.name.label("group_name"),
        console_accounts.c.is_admin,
        console_accounts.c.password_hash,
        console_accounts.c.oidc_subject,
    )
    .select_from(users)
    .join(groups, users.c.group_id == groups.c.id)
    .outerjoin(console_accounts, console_accounts.c.user_id == users.c.id)
)


def _account(row: AnyRow) -> ConsoleAccount:
    return ConsoleAccount(
        user_id=row.user_id,
        user_name=row.user_name,
        group=row.group_name,
        active=bool(row.active),
        is_admin=bool(row.is_admin),
        password_hash=row.password_hash,
        oidc_subject=row.oidc_subject,
    )


class SqlAccounts:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def by_id(self, uid: int) -> ConsoleAccount | None:
        """The user with their console account (a user without one reads as a plain user)."""
        async with reading(self.engine) as conn:
            row = (await conn.execute(_ACCOUNT.where(users.c.id == uid))).first()
        return None if row is None else _account(row)

    async def everyone(self) -> dict[str, ConsoleAccount]:
        """Every user with their console account (or none), by user name."""
        async with reading(self.engine) as conn:
            rows = (await conn.execute(_ACCOUNT)).all()
        return {r.user_name: _account(r) for r in rows}

    async def by_name(self, name: str) -> ConsoleAccount | None:
        async with reading(self.engine) as conn:
            row = (await conn.execute(_ACCOUNT.where(users.c.name == name))).first()
        return None if row is None else _account(row)

    async def by_subject(self, subject: str) -> ConsoleAccount | None:
        async with reading(self.engine) as conn:
            row = (
                await conn.execute(_ACCOUNT.where(console_accounts.c.oidc_subject == subject))
            ).first()
        return None if row is None else _account(row)

    async def save(
        self,
        user: str,
        *,
        password_hash: str | None = None,
        oidc_subject: str | None = None,
        is_admin: bool | None = None,
    ) -> ConsoleAccount:
        """Creates or updates the user's account; arguments left as None keep their value."""
        values: dict[str, object] = {"updated_at": utcnow()}
        if password_hash is not None:
            values["password_hash"] = password_hash
        if oidc_subject is not None:
            values["oidc_subject"] = oidc_subject
        if is_admin is not None:
            values["is_admin"] = is_admin
        async with writing(self.engine, "that sign-in is already linked to another user") as conn:
            uid = await user_id(conn, user)
            exists = await conn.scalar(
                select(console_accounts.c.user_id).where(console_accounts.c.user_id == uid)
            )
            if exists is None:
                values.setdefault("is_admin", False)
                await conn.execute(insert(console_accounts).values(user_id=uid, **values))
            else:
                await conn.execute(
                    update(console_accounts)
                    .where(console_accounts.c.user_id == uid)
                    .values(**values)
                )
        account = await self.by_name(user)
        if account is None:
            raise NotFound(f"no user named {user!r}")
        return account
