"""API keys in the database: creation shows the key once, storage keeps no secret, revocation
and expiry by id, prefix or full key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from mindrouter.errors import InvalidRequest, NotFound
from mindrouter.identity.keys import digest_key
from mindrouter.stores.sql import SqlStores
from mindrouter.stores.sql.schema import api_keys

from .conftest import unique


async def make_user(stores: SqlStores) -> str:
    group, user = unique("g"), unique("u")
    await stores.directory.create_group(group)
    await stores.directory.create_user(user, group)
    return user


async def test_create_stores_only_prefix_digest_and_argon2_hash(stores: SqlStores) -> None:
    user = await make_user(stores)
    created = await stores.keys.create_key(user, name="laptop")
    key = created.key
    assert key.startswith("mr2_") and len(key) >= 4 + 43
    assert created.info.prefix == key[:12] and created.info.user == user
    async with stores.engine.connect() as conn:
        row = (await conn.execute(select(api_keys).where(api_keys.c.id == created.info.id))).one()
    assert row.prefix == key[4:12]
    assert row.digest == digest_key(key)
    assert row.secret_hash.startswith("$argon2id$")
    assert key not in {str(v) for v in row}

    listed = await stores.keys.list_keys(user)
    assert [k.prefix for k in listed] == [created.info.prefix]
    assert "key" not in type(listed[0]).__dataclass_fields__


async def test_revoke_by_prefix_id_or_full_key(stores: SqlStores) -> None:
    user = await make_user(stores)
    keys = [await stores.keys.create_key(user) for _ in range(3)]
    refs = [keys[0].info.prefix, str(keys[1].info.id), keys[2].key]
    for created, ref in zip(keys, refs, strict=True):
        before = await stores.keys.auth_epoch()
        revoked = await stores.keys.revoke_key(ref)
        assert revoked.id == created.info.id and revoked.revoked_at is not None
        assert await stores.keys.auth_epoch() == before + 1
    again = await stores.keys.revoke_key(refs[0])
    assert again.revoked_at == (await stores.keys.get_key(refs[0])).revoked_at


async def test_set_and_clear_expiry(stores: SqlStores) -> None:
    user = await make_user(stores)
    created = await stores.keys.create_key(user)
    when = datetime(2031, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    info = await stores.keys.set_key_expiry(created.info.prefix, when)
    assert info.expires_at == when, "microseconds and the UTC zone survive the round trip"
    info = await stores.keys.set_key_expiry(str(created.info.id), None)
    assert info.expires_at is None


async def test_unknown_and_malformed_references(stores: SqlStores) -> None:
    with pytest.raises(NotFound) as caught:
        await stores.keys.revoke_key("mr2_" + "x" * 43)
    assert "x" * 10 not in caught.value.message, "a full key is never echoed"
    with pytest.raises(NotFound):
        await stores.keys.revoke_key("999999999")
    with pytest.raises(InvalidRequest):
        await stores.keys.revoke_key("not-a-key")
    with pytest.raises(NotFound, match="no user"):
        await stores.keys.create_key(unique("ghost"))


async def test_deleting_a_user_deletes_their_keys(stores: SqlStores) -> None:
    user = await make_user(stores)
    created = await stores.keys.create_key(user, expires_at=datetime.now(UTC) + timedelta(days=1))
    await stores.directory.delete_user(user)
    with pytest.raises(NotFound):
        await stores.keys.get_key(str(created.info.id))
