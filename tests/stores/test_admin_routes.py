"""The admin router mounted on a bare FastAPI app, driven over ASGI with httpx."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from mindrouter.http.admin_routes import admin_router
from mindrouter.identity.authenticate import Authenticator
from mindrouter.stores.sql import SqlStores

from .conftest import FAST_HASHER, unique


class Admin:
    def __init__(self, client: httpx.AsyncClient, stores: SqlStores, key: str, user: str) -> None:
        self.client, self.stores, self.key, self.user = client, stores, key, user

    async def call(
        self, method: str, path: str, key: str | None = None, **kw: object
    ) -> httpx.Response:
        headers = {"authorization": f"Bearer {key or self.key}"}
        return await self.client.request(method, path, headers=headers, **kw)  # type: ignore[arg-type]


@pytest.fixture
async def admin(stores: SqlStores) -> AsyncIterator[Admin]:
    group, user = unique("ops"), unique("root")
    await stores.directory.create_group(group)
    await stores.directory.create_user(user, group)
    key = (await stores.keys.create_key(user, admin=True)).key
    auth = Authenticator(stores.keys, hasher=FAST_HASHER)
    app = FastAPI()
    app.include_router(admin_router(stores, auth))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://admin") as client:
        yield Admin(client, stores, key, user)


def assert_error(response: httpx.Response, status: int, kind: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == kind and isinstance(error["message"], str)
    assert "code" in error


async def test_no_key_is_401_and_a_user_key_is_403(admin: Admin) -> None:
    assert_error(await admin.client.get("/admin/groups"), 401, "authentication_error")
    assert_error(
        await admin.call("GET", "/admin/groups", key="mr2_nope"), 401, "authentication_error"
    )
    user_key = (await admin.stores.keys.create_key(admin.user)).key
    assert_error(await admin.call("GET", "/admin/groups", key=user_key), 403, "permission_error")


async def test_groups_users_and_keys(admin: Admin) -> None:
    group, user = unique("students"), unique("bob")
    r = await admin.call("POST", "/admin/groups", json={"name": group, "rpm": 30})
    assert r.status_code == 201 and r.json()["limits"]["rpm"] == 30
    r = await admin.call("PATCH", f"/admin/groups/{group}", json={"token_budget": 99})
    assert r.json()["limits"]["token_budget"] == 99
    r = await admin.call("POST", "/admin/users", json={"name": user, "group": group, "rpm": 3})
    assert r.status_code == 201 and r.json()["overrides"]["rpm"] == 3
    r = await admin.call("PATCH", f"/admin/users/{user}", json={"rpm": None, "active": False})
    assert r.json()["overrides"]["rpm"] is None and r.json()["active"] is False

    r = await admin.call("POST", "/admin/keys", json={"user": user, "expires_days": 2})
    assert r.status_code == 201
    created = r.json()
    key, prefix = created["key"], created["info"]["prefix"]
    assert key.startswith(prefix) and created["info"]["expires_at"] is not None

    listed = (await admin.call("GET", "/admin/keys", params={"user": user})).json()
    assert [k["prefix"] for k in listed] == [prefix]
    assert key not in (await admin.call("GET", "/admin/keys")).text

    r = await admin.call("PATCH", f"/admin/keys/{prefix}", json={"expires_at": None})
    assert r.json()["expires_at"] is None
    r = await admin.call("POST", f"/admin/keys/{prefix}/revoke")
    assert r.status_code == 200 and r.json()["revoked_at"] is not None
    assert_error(
        await admin.call("POST", "/admin/keys/mr2_zzzzzzzz/revoke"), 404, "invalid_request_error"
    )

    assert (await admin.call("DELETE", f"/admin/users/{user}")).status_code == 204
    assert (await admin.call("DELETE", f"/admin/groups/{group}")).status_code == 204


async def test_a_revoked_admin_key_stops_working_at_once(admin: Admin) -> None:
    assert (await admin.call("GET", "/admin/users")).status_code == 200
    r = await admin.call("POST", f"/admin/keys/{admin.key[:12]}/revoke")
    assert r.status_code == 200
    assert_error(await admin.call("GET", "/admin/users"), 401, "authentication_error")


async def test_backends_and_models(admin: Admin) -> None:
    b, m = unique("gpu"), unique("llama")
    body = {"name": b, "engine": "ollama", "url": "http://h:11434", "models": [{"name": m}]}
    r = await admin.call("POST", "/admin/backends", json=body)
    assert r.status_code == 201 and r.json()["models"] == [{"name": m, "upstream": m}]
    r = await admin.call("PATCH", f"/admin/backends/{b}", json={"enabled": False, "models": None})
    assert r.json()["enabled"] is False and r.json()["models"] is None
    assert b in [x["name"] for x in (await admin.call("GET", "/admin/backends")).json()]
    assert (await admin.call("DELETE", f"/admin/backends/{b}")).status_code == 204

    r = await admin.call(
        "POST", "/admin/models", json={"name": m, "capabilities": ["chat", "vision"]}
    )
    assert r.status_code == 201 and r.json()["capabilities"] == ["chat", "vision"]
    r = await admin.call("PATCH", f"/admin/models/{m}", json={"context_length": 4096})
    assert r.json()["context_length"] == 4096
    assert (await admin.call("DELETE", f"/admin/models/{m}")).status_code == 204
    assert_error(await admin.call("DELETE", f"/admin/models/{m}"), 404, "invalid_request_error")


async def test_invalid_bodies_are_400_with_the_field(admin: Admin) -> None:
    r = await admin.call("POST", "/admin/groups", json={"name": unique("g"), "rpm": -1})
    assert_error(r, 400, "invalid_request_error")
    assert r.json()["error"]["param"] == "rpm"
    r = await admin.call(
        "POST", "/admin/backends", json={"name": "x", "engine": "tgi", "url": "http://x"}
    )
    assert_error(r, 400, "invalid_request_error")


async def test_audit_query(admin: Admin) -> None:
    from mindrouter.stores.audit_records import AuditOutcome, AuditStart

    model = unique("m")
    record = AuditStart(
        user_id=None,
        user_name=admin.user,
        key_id=None,
        key_prefix=None,
        model=model,
        endpoint="/v1/chat/completions",
        messages=[{"role": "user", "content": "hi"}],
    )
    await admin.stores.audit.begin(record)
    admin.stores.audit.complete(record.uuid, AuditOutcome("ok", "yo", 5, 1))
    await admin.stores.audit.flush()
    r = await admin.call("GET", "/admin/audit", params={"model": model, "status": "ok"})
    assert r.status_code == 200
    [entry] = r.json()
    assert entry["messages"] == [{"role": "user", "content": "hi"}]
    assert (entry["input_tokens"], entry["output_tokens"], entry["output"]) == (5, 1, "yo")
    assert_error(
        await admin.call("GET", "/admin/audit", params={"limit": 0}), 400, "invalid_request_error"
    )


def test_the_openapi_document_describes_the_admin_api() -> None:
    from mindrouter.stores.sql import open_stores

    stores = open_stores("sqlite+aiosqlite:///:memory:")
    app = FastAPI()
    app.include_router(admin_router(stores, Authenticator(stores.keys)))
    paths = app.openapi()["paths"]
    assert {"/admin/groups", "/admin/users", "/admin/keys", "/admin/audit"} <= set(paths)
    assert "requestBody" in paths["/admin/keys"]["post"]
    assert "401" in paths["/admin/keys"]["get"]["responses"]
