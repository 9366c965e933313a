"""API keys in the database: create (the secret leaves once, in the return value), list, revoke,
set expiry, and the lookups authentication needs (`KeyLookup`).

A key is named by its id, its display prefix (`mr2_` + 8 characters) or the full key. Revoking
and changing expiry bump the auth epoch in the same transaction, so every gateway process
drops its cached copy within a poll.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, false, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import Select

from mindrouter.bounds import as_row_id
from mindrouter.errors import InvalidRequest, NotFound
from mindrouter.identity.keys import (
    KEY_SCHEME,
    KeyHasher,
    digest_key,
    display_prefix,
    generate_key,
    is_display_prefix,
)
from mindrouter.stores.records import (
    ApiKeyInfo,
    CreatedKey,
    GroupLimits,
    KeyRecord,
    LimitOverrides,
)
from mindrouter.stores.sql.directory import user_id
from mindrouter.stores.sql.epoch import bump_epoch, poll_epoch
from mindrouter.stores.sql.schema import api_keys, groups, users
from mindrouter.stores.sql.transactions import AnyRow, reading, utcnow, writing

_INFO = select(api_keys, users.c.name.label("user_name")).join(
    users, api_keys.c.user_id == users.c.id
)

_RECORD = (
    select(
        api_keys.c.id,
        api_keys.c.digest,
        api_keys.c.secret_hash,
        api_keys.c.is_admin,
        api_keys.c.expires_at,
        api_keys.c.revoked_at,
        users.c.id.label("user_id"),
        users.c.name.label("user_name"),
        users.c.active.label("user_active"),
        users.c.scheduler_weight.label("u_scheduler_weight"),
        users.c.token_budget.label("u_token_budget"),
        users.c.rpm.label("u_rpm"),
        users.c.max_concurrent.label("u_max_concurrent"),
        users.c.budget_period_days.label("u_budget_period_days"),
        groups.c.name.label("group_name"),
        groups.c.scheduler_weight,
        groups.c.token_budget,
        groups.c.rpm,
        groups.c.max_concurrent,
        groups.c.budget_period_days,
        groups.c.models.label("group_models"),
    )
    .join(users, api_keys.c.user_id == users.c.id)
    .join(groups, users.c.group_id == groups.c.id)
)


def _info(row: AnyRow) -> ApiKeyInfo:
    return ApiKeyInfo(
        id=row.id,
        prefix=display_prefix(row.prefix),
        user=row.user_name,
        is_admin=bool(row.is_admin),
        name=row.name,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        last_used_at=row.last_used_at,
    )


def _record(row: AnyRow) -> KeyRecord:
    return KeyRecord(
        key_id=row.id,
        digest=row.digest,
        secret_hash=row.secret_hash,
        is_admin=bool(row.is_admin),
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        user_id=row.user_id,
        user_name=row.user_name,
        user_active=bool(row.user_active),
        group_name=row.group_name,
        limits=GroupLimits(
            scheduler_weight=row.scheduler_weight,
            token_budget=row.token_budget,
            rpm=row.rpm,
            max_concurrent=row.max_concurrent,
            budget_period_days=row.budget_period_days,
        ),
        overrides=LimitOverrides(
            scheduler_weight=row.u_scheduler_weight,
            token_budget=row.u_token_budget,
            rpm=row.u_rpm,
            max_concurrent=row.u_max_concurrent,
            budget_period_days=row.u_budget_period_days,
        ),
        group_models=row.group_models,
    )


def _where_ref(query: Select[Any], ref: str) -> Select[Any]:
    """Narrows a key query to `ref`: an id, a display prefix, or a full key."""
    ref = ref.strip()
    if ref.isascii() and ref.isdigit():
        key_id = as_row_id(ref)
        # An id past the column's range names no key (and must not reach the database).
        return query.where(api_keys.c.id == key_id if key_id is not None else false())
    if is_display_prefix(ref):
        return query.where(api_keys.c.prefix == ref[len(KEY_SCHEME) :])
    if ref.startswith(KEY_SCHEME):
        return query.where(api_keys.c.digest == digest_key(ref))
    raise InvalidRequest(
        "name a key by its id, its prefix (mr2_ + 8 characters) or the full key", param="key"
    )


class SqlKeyStore:
    def __init__(
        self,
        engine: AsyncEngine,
        hasher: KeyHasher | None = None,
        polls: AsyncEngine | None = None,
    ) -> None:
        self.engine = engine
        self.hasher = hasher or KeyHasher()
        self._polls = polls or engine  # the epoch polls' engine (`epoch.poll_epoch`)

    async def create_key(
        self,
        user: str,
        *,
        admin: bool = False,
        expires_at: datetime | None = None,
        name: str | None = None,
    ) -> CreatedKey:
        new = generate_key()
        # Argon2 is deliberately slow: off the event loop.
        secret_hash = await asyncio.to_thread(self.hasher.hash, new.key)
        async with writing(self.engine) as conn:
            uid = await user_id(conn, user)
            result = await conn.execute(
                insert(api_keys).values(
                    user_id=uid,
                    prefix=new.prefix,
                    digest=new.digest,
                    secret_hash=secret_hash,
                    is_admin=admin,
                    name=name,
                    created_at=utcnow(),
                    expires_at=expires_at,
                )
            )
            assert result.inserted_primary_key is not None
            info = await self._get(conn, str(result.inserted_primary_key[0]))
        return CreatedKey(info=info, key=new.key)

    async def list_keys(self, user: str | None = None) -> list[ApiKeyInfo]:
        query = _INFO.order_by(api_keys.c.id)
        async with reading(self.engine) as conn:
            if user is not None:
                query = query.where(api_keys.c.user_id == await user_id(conn, user))
            return [_info(r) for r in await conn.execute(query)]

    async def get_key(self, ref: str) -> ApiKeyInfo:
        async with reading(self.engine) as conn:
            return await self._get(conn, ref)

    async def revoke_key(self, ref: str) -> ApiKeyInfo:
        """Revokes the key (a no-op for one already revoked) and returns it."""
        async with writing(self.engine) as conn:
            info = await self._get(conn, ref)
            if info.revoked_at is None:
                await conn.execute(
                    update(api_keys).where(api_keys.c.id == info.id).values(revoked_at=utcnow())
                )
                await bump_epoch(conn)
                info = await self._get(conn, str(info.id))
        return info

    async def set_key_expiry(self, ref: str, expires_at: datetime | None) -> ApiKeyInfo:
        async with writing(self.engine) as conn:
            info = await self._get(conn, ref)
            await conn.execute(
                update(api_keys).where(api_keys.c.id == info.id).values(expires_at=expires_at)
            )
            await bump_epoch(conn)
            return await self._get(conn, str(info.id))

    async def _get(self, conn: AsyncConnection, ref: str) -> ApiKeyInfo:
        rows = (await conn.execute(_where_ref(_INFO, ref))).all()
        if not rows:
            # The reference is not repeated: it may be a full key, which must not be echoed.
            raise NotFound("no such API key")
        if len(rows) > 1:
            raise InvalidRequest(f"more than one key has the prefix {ref}; name it by its id")
        return _info(rows[0])

    # -- KeyLookup -----------------------------------------------------------------------------

    async def find_keys(self, prefix: str) -> Sequence[KeyRecord]:
        async with reading(self.engine) as conn:
            rows = await conn.execute(_RECORD.where(api_keys.c.prefix == prefix))
            return [_record(r) for r in rows]

    async def auth_epoch(self) -> int:
        return await poll_epoch(self._polls)

    async def record_key_use(self, uses: Mapping[int, datetime]) -> None:
        if not uses:
            return
        statement = (
            update(api_keys)
            .where(api_keys.c.id == bindparam("key_id"))
            .values(last_used_at=bindparam("used_at"))
        )
        async with writing(self.engine) as conn:
            await conn.execute(
                statement, [{"key_id": k, "used_at": t} for k, t in sorted(uses.items())]
            )
