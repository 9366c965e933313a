"""OpenID Connect sign-in against a provider started by the test: the whole code flow with
PKCE, users created in the mapped group, and every way a sign-in must be refused."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from mindrouter.serving import ThreadServer
from tests.console.idp import CLIENT_ID, CLIENT_SECRET, Provider
from tests.console.stack import ConsoleStack, start_console_stack


@pytest.fixture(scope="module")
def sso() -> Iterator[tuple[ConsoleStack, Provider]]:
    provider = Provider()
    server = ThreadServer(provider.app()).start()
    provider.issuer = server.url
    stack = start_console_stack(
        groups=[{"name": "testers"}, {"name": "staff"}, {"name": "students"}],
        oidc={
            "issuer": server.url,
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "groups": {"cs-staff": "staff"},
            "default_group": "students",
            "admin_groups": ["llm-admins"],
        },
    )
    stack.extra.append(server)
    try:
        yield stack, provider
    finally:
        stack.close()


def flow(
    stack: ConsoleStack, provider: Provider, claims: dict[str, object], tamper: str | None = None
) -> tuple[httpx.Client, httpx.Response]:
    """Follows the redirects from the console to the provider and back, as a browser would."""
    provider.claims, provider.tamper = claims, tamper
    client = stack.session()
    r = client.get("/console/sign-in/oidc")
    assert r.status_code == 302
    to_provider = r.headers["location"]
    query = parse_qs(urlsplit(to_provider).query)
    assert query["code_challenge_method"] == ["S256"] and query["nonce"] and query["state"]
    back = httpx.get(to_provider, follow_redirects=False)
    assert back.status_code == 302
    return client, client.get(back.headers["location"])


def test_first_sign_in_creates_the_user_in_the_mapped_group(
    sso: tuple[ConsoleStack, Provider],
) -> None:
    stack, provider = sso
    client, r = flow(
        stack,
        provider,
        {"sub": "u-1", "preferred_username": "carol", "groups": ["cs-staff", "other"]},
    )
    assert r.status_code == 303, r.text
    usage = client.get("/console/usage")
    assert usage.status_code == 200 and "staff" in usage.text
    assert provider.pkce_checked >= 1
    # Not an administrator.
    assert client.get("/console/admin/users").status_code == 404
    # Signing in again finds the same user by subject.
    client, r = flow(stack, provider, {"sub": "u-1", "preferred_username": "carol"})
    assert r.status_code == 303


def test_unmapped_users_get_the_default_group_and_admin_groups_make_admins(
    sso: tuple[ConsoleStack, Provider],
) -> None:
    stack, provider = sso
    client, r = flow(
        stack, provider, {"sub": "u-2", "preferred_username": "dave", "groups": ["llm-admins"]}
    )
    assert r.status_code == 303
    users = client.get("/console/admin/users", params={"q": "dave"})
    assert users.status_code == 200
    assert 'value="students" selected' in users.text


@pytest.mark.parametrize("tamper", ["nonce", "issuer", "expired", "key", "audience"])
def test_bad_id_tokens_are_refused(sso: tuple[ConsoleStack, Provider], tamper: str) -> None:
    stack, provider = sso
    client, r = flow(
        stack, provider, {"sub": f"t-{tamper}", "preferred_username": f"t-{tamper}"}, tamper
    )
    assert r.status_code == 400
    assert "single sign-on failed" in r.text
    assert client.get("/console/usage").status_code == 303


def test_a_wrong_state_is_refused(sso: tuple[ConsoleStack, Provider]) -> None:
    stack, provider = sso
    provider.claims, provider.tamper = {"sub": "s-1", "preferred_username": "eve"}, None
    client = stack.session()
    to_provider = client.get("/console/sign-in/oidc").headers["location"]
    back = httpx.get(to_provider, follow_redirects=False).headers["location"]
    forged = back.replace("state=", "state=x")
    r = client.get(forged)
    assert r.status_code == 400
    # A callback from a browser that never started the flow (no state in its session).
    r = stack.session().get(back)
    assert r.status_code == 400
    assert client.get("/console/usage").status_code == 303


def test_a_name_of_a_local_account_is_not_taken_over(sso: tuple[ConsoleStack, Provider]) -> None:
    stack, provider = sso
    stack.add_account("root-local", admin=True)
    _, r = flow(stack, provider, {"sub": "attacker", "preferred_username": "root-local"})
    assert r.status_code == 403
