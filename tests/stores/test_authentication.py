"""The Authenticator over each real database: every failure mode, and the auth epoch reaching a
second process (a separate engine standing in for another worker or replica) within a second."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event

from mindrouter.errors import Unauthenticated
from mindrouter.identity.authenticate import Authenticator
from mindrouter.identity.keys import KeyHasher
from mindrouter.stores.records import GroupLimits, LimitOverrides
from mindrouter.stores.sql import SqlStores, open_stores

from .conftest import FAST_HASHER, unique


class CountingHasher(KeyHasher):
    def __init__(self) -> None:
        super().__init__(time_cost=1, memory_cost=8, parallelism=1)
        self.verifications = 0

    def verify(self, secret_hash: str, key: str) -> bool:
        self.verifications += 1
        return super().verify(secret_hash, key)


@pytest.fixture
async def other_worker(db_url: str) -> AsyncIterator[SqlStores]:
    """The same database through a separate engine and pool: another process, as far as the
    database can tell."""
    opened = open_stores(db_url, hasher=FAST_HASHER)
    try:
        yield opened
    finally:
        await opened.aclose()


async def make_key(stores: SqlStores, **key_options: object) -> tuple[str, str, str]:
    group, user = unique("g"), unique("u")
    await stores.directory.create_group(group, GroupLimits(2.0, 5000, 60, 3, 30))
    await stores.directory.create_user(user, group, overrides=LimitOverrides(rpm=10))
    created = await stores.keys.create_key(user, **key_options)  # type: ignore[arg-type]
    return created.key, user, group


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_a_valid_key_resolves_to_its_principal(stores: SqlStores) -> None:
    key, user, group = await make_key(stores, admin=True)
    auth = Authenticator(stores.keys, hasher=FAST_HASHER)
    for headers in (bearer(key), {"X-API-Key": key}, {"x-api-key": key}):
        p = await auth.authenticate(headers)
        assert (p.user_name, p.group_name, p.is_admin, p.key_prefix) == (
            user,
            group,
            True,
            key[:12],
        )
        assert (p.scheduler_weight, p.token_budget, p.rpm, p.max_concurrent) == (2.0, 5000, 10, 3)


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing"),
        ({"authorization": "Basic abc"}, "malformed"),
        ({"authorization": "Bearer sk-not-ours"}, "malformed"),
        ({"x-api-key": "mr2_short"}, "malformed"),
        ({"x-api-key": "mr2_" + "A" * 43}, "invalid"),
    ],
)
async def test_missing_malformed_and_unknown_keys(
    stores: SqlStores, headers: dict[str, str], reason: str
) -> None:
    auth = Authenticator(stores.keys, hasher=FAST_HASHER)
    with pytest.raises(Unauthenticated, match=reason):
        await auth.authenticate(headers)


async def test_a_wrong_secret_with_a_real_prefix_is_invalid(stores: SqlStores) -> None:
    key, _, _ = await make_key(stores)
    forged = key[:12] + ("B" if key[12] != "B" else "C") + key[13:]
    auth = Authenticator(stores.keys, hasher=FAST_HASHER)
    with pytest.raises(Unauthenticated, match="invalid"):
        await auth.authenticate(bearer(forged))


async def test_revoked_expired_and_inactive(stores: SqlStores) -> None:
    auth = Authenticator(stores.keys, hasher=FAST_HASHER)
    revoked, _, _ = await make_key(stores)
    await stores.keys.revoke_key(revoked[:12])
    with pytest.raises(Unauthenticated, match="revoked"):
        await auth.authenticate(bearer(revoked))

    past = datetime.now(UTC) - timedelta(seconds=1)
    expired, _, _ = await make_key(stores, expires_at=past)
    with pytest.raises(Unauthenticated, match="expired"):
        await auth.authenticate(bearer(expired))

    inactive, user, _ = await make_key(stores)
    await stores.directory.update_user(user, {"active": False})
    with pytest.raises(Unauthenticated, match="inactive"):
        await auth.authenticate(bearer(inactive))


async def test_a_warm_key_costs_no_query_and_no_argon2(stores: SqlStores) -> None:
    key, _, _ = await make_key(stores)
    hasher = CountingHasher()
    auth = Authenticator(stores.keys, hasher=hasher)
    await auth.start()
    try:
        await auth.authenticate(bearer(key))
        queries: list[str] = []
        event.listen(
            stores.engine.sync_engine,
            "before_cursor_execute",
            lambda _c, _cur, sql, *_: queries.append(sql),
        )
        for _ in range(100):
            await auth.authenticate(bearer(key))
        assert hasher.verifications == 1
        assert not [q for q in queries if "api_keys" in q]
    finally:
        await auth.stop()


async def test_expiry_is_checked_against_the_clock_on_every_hit(stores: SqlStores) -> None:
    now = [time.time()]
    key, _, _ = await make_key(stores, expires_at=datetime.fromtimestamp(now[0] + 60, UTC))
    auth = Authenticator(stores.keys, hasher=FAST_HASHER, clock=lambda: now[0])
    await auth.start()
    try:
        await auth.authenticate(bearer(key))
        now[0] += 61
        with pytest.raises(Unauthenticated, match="expired"):
            await auth.authenticate(bearer(key))
    finally:
        await auth.stop()


@pytest.mark.parametrize("change", ["revoke", "expire", "deactivate"])
# Another process sees a change at its next read of the auth epoch: its poller reads it twice
# a second while requests come, and a request after a quiet spell reads it itself (the trust
# window, tests/identity/test_authenticator.py, with an injected clock). So one poll is all a
# change needs here, and no test waits on the wall clock for it.


async def test_a_change_in_one_process_reaches_another_at_its_next_poll(
    stores: SqlStores, other_worker: SqlStores, change: str
) -> None:
    key, user, _ = await make_key(stores)
    worker = Authenticator(other_worker.keys, hasher=FAST_HASHER)
    await worker.start()
    try:
        await worker.authenticate(bearer(key))  # cached in the other worker
        if change == "revoke":
            await stores.keys.revoke_key(key[:12])
        elif change == "expire":
            await stores.keys.set_key_expiry(key[:12], datetime.now(UTC))
        else:
            await stores.directory.update_user(user, {"active": False})
        await worker.poll()
        with pytest.raises(Unauthenticated):
            await worker.authenticate(bearer(key))
    finally:
        await worker.stop()


async def test_a_group_limit_change_reaches_another_process_at_its_next_poll(
    stores: SqlStores, other_worker: SqlStores
) -> None:
    key, _, group = await make_key(stores)
    worker = Authenticator(other_worker.keys, hasher=FAST_HASHER)
    await worker.start()
    try:
        assert (await worker.authenticate(bearer(key))).token_budget == 5000
        await stores.directory.update_group(group, {"token_budget": 7})
        await worker.poll()
        assert (await worker.authenticate(bearer(key))).token_budget == 7
    finally:
        await worker.stop()


async def test_an_unreachable_database_is_an_internal_error_not_a_bad_key() -> None:
    from mindrouter.errors import InternalError
    from mindrouter.stores.sql.keys import SqlKeyStore

    down = open_stores("postgresql+asyncpg://postgres@127.0.0.1:1/none")
    try:
        auth = Authenticator(SqlKeyStore(down.engine), hasher=FAST_HASHER)
        with pytest.raises(InternalError):
            await auth.authenticate(bearer("mr2_" + "A" * 43))
    finally:
        await down.aclose()
