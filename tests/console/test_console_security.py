"""The console's safety properties over plain HTTP: CSRF, sessions, who may see what, escaping,
the security headers, and the inference path untouched."""

from __future__ import annotations

import asyncio
import re

import httpx
import openai
import pytest

from mindrouter.stores.audit_records import AuditFilter
from mindrouter.stores.sql import open_stores
from tests.console.stack import PASSWORD, ConsoleStack, csrf_of

ADMIN_PAGES = [
    "/console/admin/users",
    "/console/admin/groups",
    "/console/admin/keys",
    "/console/admin/backends",
    "/console/admin/queue",
    "/console/admin/audit",
    "/console/admin/usage",
    "/console/admin/usage.csv",
]
USER_PAGES = ["/console/usage", "/console/keys", "/console/requests", "/console/models"]


@pytest.mark.parametrize("path", ADMIN_PAGES + USER_PAGES)
def test_without_a_session_every_page_redirects_to_sign_in(
    console: ConsoleStack, path: str
) -> None:
    r = console.session().get(path)
    assert r.status_code == 303
    assert r.headers["location"].startswith("/console/sign-in?next=")


@pytest.mark.parametrize("path", ADMIN_PAGES)
def test_admin_pages_are_not_found_for_users(console: ConsoleStack, path: str) -> None:
    r = console.sign_in("tester").get(path)
    assert r.status_code == 404


def test_an_api_key_does_not_open_the_console(console: ConsoleStack) -> None:
    r = console.session().get("/console/usage", headers={"Authorization": f"Bearer {console.key}"})
    assert r.status_code == 303


def test_posts_without_the_csrf_token_are_refused(console: ConsoleStack) -> None:
    client = console.sign_in("tester")
    for data in ({"name": "x"}, {"name": "x", "csrf": "forged"}):
        r = client.post("/console/keys", data=data)
        assert r.status_code == 403
        assert "security token" in r.text
    r = client.post("/console/sign-out", data={})
    assert r.status_code == 403
    # Sign-in itself needs the token too (no login CSRF).
    r = console.session().post(
        "/console/sign-in", data={"username": "tester", "password": PASSWORD}
    )
    assert r.status_code == 403


def test_wrong_password_and_sign_in_attempts_limited() -> None:
    from tests.console.stack import start_console_stack

    s = start_console_stack(console={"sign_in_failures_per_minute": 3})
    try:
        s.add_account("alice")
        client = s.session()
        statuses = []
        for _ in range(5):
            r = client.post(
                "/console/sign-in",
                data={"csrf": csrf_of(client), "username": "alice", "password": "wrong one"},
            )
            statuses.append(r.status_code)
            if r.status_code == 401:
                assert "wrong user name or password" in r.text
        assert statuses == [401, 401, 401, 429, 429]
        # Limited means limited: the right password waits too.
        r = client.post(
            "/console/sign-in",
            data={"csrf": csrf_of(client), "username": "alice", "password": PASSWORD},
        )
        assert r.status_code == 429 and "too many failed sign-ins" in r.text
    finally:
        s.close()


def test_cookie_flags_and_security_headers(console: ConsoleStack) -> None:
    client = console.session()
    r = client.get("/console/sign-in")
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/console" in cookie
    assert "Secure" not in cookie  # plain HTTP here
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp
    assert r.headers["x-frame-options"] == "DENY"
    assert "<script>" not in r.text  # only <script src=...>
    assert not re.search(r"<script(?![^>]*\bsrc=)", r.text)


def test_secure_cookie_behind_an_https_proxy() -> None:
    from tests.console.stack import start_console_stack

    s = start_console_stack(trusted_proxies=["127.0.0.1"])
    try:
        r = s.session().get("/console/sign-in", headers={"X-Forwarded-Proto": "https"})
        assert "Secure" in r.headers["set-cookie"]
    finally:
        s.close()


def test_a_tampered_cookie_is_no_session(console: ConsoleStack) -> None:
    client = console.sign_in("tester")
    assert client.get("/console/usage").status_code == 200
    value = client.cookies["mr_console"]
    payload, _, rest = value.partition(".")
    # Another user's id in the payload, the signature left as it was.
    forged = payload[:-1] + ("A" if payload[-1] != "A" else "B") + "." + rest
    client.cookies.clear()
    client.cookies.set("mr_console", forged)
    assert client.get("/console/usage").status_code == 303


def test_sign_out_ends_the_session(console: ConsoleStack) -> None:
    client = console.sign_in("tester")
    stolen = client.cookies["mr_console"]
    r = client.post("/console/sign-out", data={"csrf": csrf_of(client, "/console/usage")})
    assert r.status_code == 303
    assert client.get("/console/usage").status_code == 303
    assert "mr_console" not in client.cookies
    # The signed cookie itself stays valid until it expires; deactivating the user ends it.
    del stolen


def test_a_deactivated_user_is_signed_out_at_the_next_click(console: ConsoleStack) -> None:
    console.add_account("leaver")
    client = console.sign_in("leaver")
    admin = console.sign_in("root")
    r = admin.post(
        "/console/admin/users/leaver",
        data={"csrf": csrf_of(admin, "/console/admin/users"), "active": "no"},
    )
    assert r.status_code == 303
    assert client.get("/console/usage").status_code == 303


def test_another_users_key_is_not_found(console: ConsoleStack) -> None:
    console.add_account("owner")
    owner = console.sign_in("owner")
    r = owner.post("/console/keys", data={"csrf": csrf_of(owner, "/console/keys"), "name": "mine"})
    assert r.status_code == 201
    key_id = re.search(r"/console/keys/(\d+)/revoke", r.text)
    assert key_id
    other = console.sign_in("tester")
    r = other.post(
        f"/console/keys/{key_id.group(1)}/revoke",
        data={"csrf": csrf_of(other, "/console/keys")},
    )
    assert r.status_code == 404
    assert "mine" in owner.get("/console/keys").text
    assert "revoked" not in owner.get("/console/keys").text


def test_another_users_request_is_not_found(console: ConsoleStack) -> None:
    oai = openai.OpenAI(base_url=console.url + "/v1", api_key=console.key, max_retries=0)
    oai.chat.completions.create(model="chat-vllm", messages=[{"role": "user", "content": "hi"}])

    async def newest() -> str:
        stores = open_stores(console.settings.database_url)
        try:
            return (await stores.audit_log.query(AuditFilter(user="tester", limit=1)))[0].uuid
        finally:
            await stores.aclose()

    uuid = asyncio.run(newest())
    assert console.sign_in("tester").get(f"/console/requests/{uuid}").status_code == 200
    console.add_account("nosy")
    assert console.sign_in("nosy").get(f"/console/requests/{uuid}").status_code == 404


def test_a_script_in_a_prompt_is_shown_as_text(console: ConsoleStack) -> None:
    hostile = "<script>alert('owned')</script><img src=x onerror=alert(1)>"
    oai = openai.OpenAI(base_url=console.url + "/v1", api_key=console.key, max_retries=0)
    oai.chat.completions.create(
        model="chat-vllm", messages=[{"role": "user", "content": hostile}], user=hostile
    )
    admin = console.sign_in("root")
    listing = admin.get("/console/admin/audit", params={"user": "tester"})
    uuid = re.search(r"/console/admin/audit/([0-9a-f-]{36})", listing.text)
    assert uuid
    page = admin.get(f"/console/admin/audit/{uuid.group(1)}").text
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(" in page


def test_the_inference_path_has_no_console_headers(console: ConsoleStack) -> None:
    r = httpx.get(console.url + "/v1/models", headers={"Authorization": f"Bearer {console.key}"})
    assert r.status_code == 200
    assert "set-cookie" not in r.headers and "content-security-policy" not in r.headers


def test_oversized_forms_are_refused(console: ConsoleStack) -> None:
    client = console.sign_in("tester")
    r = client.post(
        "/console/keys",
        content=b"a" * (300 * 1024),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 413


def test_sign_in_redirects_only_inside_the_console(console: ConsoleStack) -> None:
    for target, expected in [
        ("/console/keys", "/console/keys"),
        ("https://evil.example/", "/console/"),
        ("//evil.example/console/", "/console/"),
        ("/console//evil.example", "/console/"),
    ]:
        client = console.session()
        r = client.post(
            "/console/sign-in",
            data={
                "csrf": csrf_of(client),
                "username": "tester",
                "password": PASSWORD,
                "next": target,
            },
        )
        assert r.headers["location"] == expected


def test_a_session_older_than_session_hours_is_over(console: ConsoleStack) -> None:
    import time

    from mindrouter.console.session import serializer

    client = console.sign_in("tester")
    assert client.get("/console/usage").status_code == 200
    fresh = serializer(console.settings.secret_key).loads(client.cookies["mr_console"])
    # Correctly signed, but signed in 13 hours ago (the default lifetime is 12).
    old = {**fresh, "since": time.time() - 13 * 3600}
    client.cookies.clear()
    client.cookies.set("mr_console", serializer(console.settings.secret_key).dumps(old))
    assert client.get("/console/usage").status_code == 303


def test_inference_requests_never_enter_the_console(
    console: ConsoleStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mindrouter.console.session import ConsoleLayer

    calls: list[str] = []
    original = ConsoleLayer.__call__

    async def counting(self, scope, receive, send):  # type: ignore[no-untyped-def]
        calls.append(scope["path"])
        await original(self, scope, receive, send)

    monkeypatch.setattr(ConsoleLayer, "__call__", counting)
    oai = openai.OpenAI(base_url=console.url + "/v1", api_key=console.key, max_retries=0)
    oai.chat.completions.create(model="chat-vllm", messages=[{"role": "user", "content": "hi"}])
    oai.models.list()
    assert calls == []
    console.session().get("/console/status")
    assert calls == ["/console/status"]
