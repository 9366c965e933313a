"""The console in a real browser: the first administrator signs in with a password and sets up
a group and a user; a user signs in through a real OpenID Connect provider, lands in the mapped
group, makes a key, uses it with the openai SDK, sees the request and its tokens, revokes the
key and the SDK is refused at once. Screenshots of the main pages at desktop and phone widths
go to $MINDROUTER_SCREENSHOTS (docs/console/ with `scripts/browser screenshots`)."""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from bench.ports import free_port

from tests.browser.conftest import OidcProvider
from tests.console.stack import PASSWORD, ConsoleStack, start_console_stack

pytestmark = pytest.mark.browser

CLIENT_ID, CLIENT_SECRET = "mindrouter", "browser-suite-secret"
VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
SHOTS = Path(os.environ.get("MINDROUTER_SCREENSHOTS") or tempfile.mkdtemp(prefix="mr-shots-"))


@pytest.fixture(scope="module")
def site() -> Iterator[tuple[ConsoleStack, OidcProvider]]:
    port = free_port()
    stack = start_console_stack(
        groups=[{"name": "testers"}, {"name": "staff", "token_budget": 200000}, {"name": "guests"}],
        oidc={
            "issuer": f"http://127.0.0.1:{port}",
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "groups": {"cs-staff": "staff"},
            "default_group": "guests",
        },
    )
    provider = OidcProvider(port, CLIENT_ID, CLIENT_SECRET, f"{stack.url}/console/oidc/callback")
    # The first administrator, as `mindrouter users set-password root --admin` makes them.
    stack.add_account("root", admin=True)
    try:
        yield stack, provider
    finally:
        provider.stop()
        stack.close()


def watch(page: Any) -> list[str]:
    """Messages the browser logged about the page's security policy or its scripts."""
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("dialog", lambda d: d.accept())
    return problems


def shoot(page: Any, name: str) -> None:
    for label, size in VIEWPORTS.items():
        page.set_viewport_size(size)
        page.screenshot(path=str(SHOTS / f"{name}-{label}.png"), full_page=True)
    page.set_viewport_size(VIEWPORTS["desktop"])


def test_admin_then_sso_user_end_to_end(
    browser: Any, site: tuple[ConsoleStack, OidcProvider]
) -> None:
    stack, _ = site
    SHOTS.mkdir(parents=True, exist_ok=True)

    # -- the first administrator, with a password ----------------------------------------------
    admin_ctx = browser.new_context(viewport=VIEWPORTS["desktop"])
    page = admin_ctx.new_page()
    problems = watch(page)
    page.goto(f"{stack.url}/console/admin/groups")
    assert "/console/sign-in" in page.url  # not signed in yet
    shoot(page, "sign-in")
    page.fill("input[name=username]", "root")
    page.fill("input[name=password]", PASSWORD)
    page.click("form[action='/console/sign-in'] button[type=submit]")
    page.wait_for_url("**/console/admin/groups")
    new_group = page.locator("form[action='/console/admin/groups']")
    new_group.locator("input[name=name]").fill("physics")
    new_group.locator("input[name=token_budget]").fill("100000")
    new_group.locator("input[name=scheduler_weight]").fill("2")
    new_group.locator("button[type=submit]").click()
    page.wait_for_selector("text=Group physics created.")
    shoot(page, "admin-groups")
    page.goto(f"{stack.url}/console/admin/users")
    add = page.locator("form[method=post][action='/console/admin/users']")
    add.locator("input[name=name]").fill("judy")
    add.locator("select[name=group]").select_option("physics")
    add.locator("input[name=password]").fill("judy's password 1")
    add.locator("button[type=submit]").click()
    page.wait_for_selector("text=User judy created in group physics.")

    # -- a user through single sign-on -------------------------------------------------------
    user_ctx = browser.new_context(viewport=VIEWPORTS["desktop"])
    upage = user_ctx.new_page()
    uproblems = watch(upage)
    upage.goto(f"{stack.url}/console/")
    upage.click("text=Sign in with single sign-on")
    # The provider's own sign-in and consent pages.
    upage.wait_for_selector("input[name=login]")
    upage.fill("input[name=login]", "staff-kim")
    upage.fill("input[name=password]", "anything")
    upage.click("button[type=submit]")
    upage.wait_for_selector("button[autofocus], button[type=submit]")
    if "/console/" not in upage.url:
        upage.click("button[type=submit]")  # consent
    upage.wait_for_url("**/console/usage")
    assert "staff" in upage.inner_text("main")  # the mapped group

    upage.goto(f"{stack.url}/console/keys")
    upage.fill("input[name=name]", "notebook")
    upage.fill("input[name=expires]", "30")
    upage.click("form[action='/console/keys'] button[type=submit]")
    key = upage.inner_text("#new-key").strip()
    assert key.startswith("mr2_")
    shoot(upage, "keys-new")

    oai = openai.OpenAI(base_url=stack.url + "/v1", api_key=key, max_retries=0)
    reply = oai.chat.completions.create(
        model="chat-vllm", messages=[{"role": "user", "content": "Hello from the browser suite"}]
    )
    assert reply.usage is not None
    for _ in range(100):  # the audit record completes moments after the answer
        upage.goto(f"{stack.url}/console/requests")
        if upage.locator("text=ok").count():
            break
        time.sleep(0.1)
    row = upage.inner_text("tbody tr")
    assert "chat-vllm" in row and str(reply.usage.prompt_tokens) in row
    shoot(upage, "requests")
    upage.goto(f"{stack.url}/console/usage")
    assert f"{reply.usage.total_tokens:,}" in upage.inner_text(".tiles")
    assert "chat-vllm" in upage.inner_text("main")
    shoot(upage, "usage")
    upage.goto(f"{stack.url}/console/models")
    shoot(upage, "models")

    # Revoke: the very next SDK call is refused.
    upage.goto(f"{stack.url}/console/keys")
    upage.click("button:has-text('Revoke')")
    upage.wait_for_selector("text=revoked.")
    revoked_at = time.monotonic()
    with pytest.raises(openai.AuthenticationError):
        oai.chat.completions.create(model="chat-vllm", messages=[{"role": "user", "content": "x"}])
    print(f"refused {time.monotonic() - revoked_at:.3f} s after the revocation")

    # The administrator's views of it.
    for name in ("users", "keys", "backends", "queue", "audit"):
        page.goto(f"{stack.url}/console/admin/{name}")
        shoot(page, f"admin-{name}")
    link = page.locator("a:has-text('Record')").first
    link.click()
    page.wait_for_selector("text=Prompt")
    shoot(page, "admin-audit-record")
    page.goto(f"{stack.url}/console/status")
    shoot(page, "status")

    csp = [p for p in problems + uproblems if "Content Security Policy" in p or "Refused" in p]
    assert not csp, csp
    assert not [p for p in problems + uproblems if "Uncaught" in p]
    assert re.search(r"\d", row)
