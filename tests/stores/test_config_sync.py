"""apply_config: the YAML's groups, users, backends and models upserted by name, idempotently,
never deleting or touching what the config does not own."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mindrouter.routing.backend_config import BackendConfig
from mindrouter.settings import ConfigError, settings_from_dict
from mindrouter.stores.sql import SqlStores, apply_config

from .conftest import unique


def config(group: str, user: str, backend: str, model: str, rpm: int = 60) -> dict[str, object]:
    return {
        "groups": [{"name": group, "scheduler_weight": 3, "token_budget": 1000, "rpm": rpm}],
        "users": [{"name": user, "group": group}],
        "backends": [
            {
                "name": backend,
                "engine": "vllm",
                "url": "http://gpu1:8000",
                "gpu": "H200",
                "models": [model, {"name": f"{model}-x", "upstream": "org/x"}],
            }
        ],
        "models": [{"name": model, "context_length": 32768, "capabilities": ["chat", "tools"]}],
    }


async def test_apply_twice_changes_nothing_the_second_time(stores: SqlStores) -> None:
    names = [unique(p) for p in ("g", "u", "b", "m")]
    settings = settings_from_dict(config(names[0], names[1], names[2], names[3]))
    first = await apply_config(stores, settings)
    assert set(first.created) == {
        f"group:{names[0]}",
        f"user:{names[1]}",
        f"backend:{names[2]}",
        f"model:{names[3]}",
    }
    epoch = await stores.keys.auth_epoch()
    second = await apply_config(stores, settings)
    assert not second.changed
    assert await stores.keys.auth_epoch() == epoch

    group = await stores.directory.get_group(names[0])
    assert (group.limits.scheduler_weight, group.limits.token_budget) == (3.0, 1000)
    backend = (await stores.catalog.get_backend(names[2])).config
    assert backend.gpu == "H200" and backend.models is not None
    assert [(m.name, m.upstream) for m in backend.models] == [
        (names[3], names[3]),
        (f"{names[3]}-x", "org/x"),
    ]
    model = await stores.catalog.get_model(names[3])
    assert (model.context_length, model.capabilities) == (32768, ["chat", "tools"])


async def test_changes_update_but_never_delete_or_touch_keys_and_usage(stores: SqlStores) -> None:
    g, u, b, m = (unique(p) for p in ("g", "u", "b", "m"))
    await apply_config(stores, settings_from_dict(config(g, u, b, m)))
    user = await stores.directory.get_user(u)
    key = await stores.keys.create_key(u)
    await stores.usage.add_usage(user.id, 42, datetime.now(UTC))
    await stores.directory.update_user(u, {"active": False, "rpm": 5})
    extra = unique("admin-made")
    await stores.directory.create_group(extra)

    epoch = await stores.keys.auth_epoch()
    report = await apply_config(stores, settings_from_dict(config(g, u, b, m, rpm=120)))
    assert report.updated == [f"group:{g}"]
    assert await stores.keys.auth_epoch() > epoch, "a group limit change invalidates keys"

    assert (await stores.directory.get_group(g)).limits.rpm == 120
    assert (await stores.directory.get_group(extra)).name == extra
    after = await stores.directory.get_user(u)
    assert (after.active, after.overrides.rpm) == (False, 5)
    assert (await stores.keys.get_key(key.info.prefix)).revoked_at is None
    assert (await stores.usage.get_usage(user.id)).lifetime_tokens == 42


async def test_users_default_group_is_created_and_unknown_groups_are_refused(
    stores: SqlStores,
) -> None:
    u = unique("u")
    await apply_config(stores, settings_from_dict({"users": [{"name": u}]}))
    assert (await stores.directory.get_user(u)).group == "default"
    with pytest.raises(ConfigError, match="no group named"):
        settings_from_dict({"users": [{"name": u, "group": unique("nope")}]})


async def test_differences_with_the_database_are_reported(stores: SqlStores) -> None:
    g, u, b, m = (unique(p) for p in ("g", "u", "b", "m"))
    settings = settings_from_dict(config(g, u, b, m))
    await apply_config(stores, settings)
    await stores.catalog.update_backend(b, {"max_concurrent": 3})
    made = unique("api-made")
    await stores.catalog.create_backend(BackendConfig(made, "ollama", "http://gpu2:11434"))
    epoch = await stores.catalog.catalog_epoch()
    report = await apply_config(stores, settings)
    assert report.differences == [
        f"backend:{b} max_concurrent: 3 in the database, 8 in the file (the file's applied)"
    ]
    assert f"backend:{made}" in report.only_in_database
    assert (await stores.catalog.get_backend(b)).config.max_concurrent == 8
    assert (await stores.catalog.get_backend(made)).config.engine == "ollama", "left alone"
    assert await stores.catalog.catalog_epoch() > epoch, "routing re-reads the rows"
