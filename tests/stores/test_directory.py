"""Groups and users: the lifecycle, limit overrides, and the auth epoch moving with changes."""

from __future__ import annotations

import pytest

from mindrouter.errors import InvalidRequest, NotFound
from mindrouter.stores.records import GroupLimits, LimitOverrides
from mindrouter.stores.sql import SqlStores

from .conftest import unique


async def epoch(stores: SqlStores) -> int:
    return await stores.keys.auth_epoch()


async def test_group_lifecycle(stores: SqlStores) -> None:
    name = unique("staff")
    group = await stores.directory.create_group(name, GroupLimits(2.0, 1000, 60, 4, 7))
    assert group.limits == GroupLimits(2.0, 1000, 60, 4, 7)
    assert name in [g.name for g in await stores.directory.list_groups()]

    before = await epoch(stores)
    renamed = unique("faculty")
    updated = await stores.directory.update_group(name, {"name": renamed, "rpm": 120})
    assert (updated.name, updated.limits.rpm, updated.limits.token_budget) == (renamed, 120, 1000)
    assert await epoch(stores) > before, "a limit change must bump the auth epoch"

    with pytest.raises(InvalidRequest, match="already exists"):
        await stores.directory.create_group(renamed)
    await stores.directory.delete_group(renamed)
    with pytest.raises(NotFound):
        await stores.directory.get_group(renamed)


async def test_impossible_limits_are_refused(stores: SqlStores) -> None:
    with pytest.raises(InvalidRequest, match="scheduler_weight"):
        await stores.directory.create_group(unique("g"), GroupLimits(scheduler_weight=0))
    with pytest.raises(InvalidRequest, match="rpm"):
        await stores.directory.create_group(unique("g"), GroupLimits(rpm=-1))


async def test_user_lifecycle_with_overrides(stores: SqlStores) -> None:
    group, other = unique("students"), unique("researchers")
    await stores.directory.create_group(group)
    await stores.directory.create_group(other)
    name = unique("alice")
    user = await stores.directory.create_user(name, group, overrides=LimitOverrides(rpm=5))
    assert (user.group, user.active, user.overrides.rpm, user.overrides.token_budget) == (
        group,
        True,
        5,
        None,
    )
    assert [u.name for u in await stores.directory.list_users(group)] == [name]

    before = await epoch(stores)
    user = await stores.directory.update_user(
        name, {"group": other, "active": False, "rpm": None, "token_budget": 10}
    )
    assert (user.group, user.active, user.overrides.rpm, user.overrides.token_budget) == (
        other,
        False,
        None,
        10,
    )
    assert await epoch(stores) > before

    with pytest.raises(InvalidRequest, match="still has 1 user"):
        await stores.directory.delete_group(other)
    with pytest.raises(NotFound, match="no group"):
        await stores.directory.update_user(name, {"group": unique("nope")})
    with pytest.raises(InvalidRequest, match="already exists"):
        await stores.directory.create_user(name, group)

    await stores.directory.delete_user(name)
    with pytest.raises(NotFound):
        await stores.directory.get_user(name)
    await stores.directory.delete_group(other)


async def test_names_are_case_sensitive_on_every_engine(stores: SqlStores) -> None:
    group = unique("Case")
    await stores.directory.create_group(group)
    await stores.directory.create_group(group.lower())
    assert {g.name for g in await stores.directory.list_groups()} >= {group, group.lower()}
