"""What the pages do: an administrator sets up a group and a user, the user makes a key, uses it
and finds the request, its tokens and their usage; revoking the key stops it; the status page
and the CSV export say what they should."""

from __future__ import annotations

import csv
import io
import re
import time
from datetime import UTC, datetime

import openai
import pytest

from mindrouter.console import status as status_module
from mindrouter.stores.sql import open_stores
from tests.console.stack import PASSWORD, ConsoleStack, csrf_of


def settled(client, path: str, needle: str) -> str:  # type: ignore[no-untyped-def]
    """The page once it shows `needle`: the audit writer completes records in the background,
    moments after the answer reached the client."""
    for _ in range(200):
        text: str = client.get(path).text
        if needle in text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"{path} never showed {needle!r}")


def post(client, path: str, form_page: str, **data: str):  # type: ignore[no-untyped-def]
    return client.post(path, data={"csrf": csrf_of(client, form_page), **data})


def test_admin_sets_up_a_user_who_uses_a_key(console: ConsoleStack) -> None:
    admin = console.sign_in("root")
    r = post(
        admin,
        "/console/admin/groups",
        "/console/admin/groups",
        name="physics",
        token_budget="5000",
        budget_period_days="7",
        rpm="60",
        max_concurrent="2",
        scheduler_weight="2",
    )
    assert r.status_code == 303
    assert "physics" in admin.get("/console/admin/groups").text
    r = post(
        admin,
        "/console/admin/users",
        "/console/admin/users",
        name="frank",
        group="physics",
        password=PASSWORD,
    )
    assert r.status_code == 303
    assert "User frank created" in admin.get("/console/admin/users").text

    frank = console.sign_in("frank")
    r = post(frank, "/console/keys", "/console/keys", name="laptop", expires="30")
    assert r.status_code == 201
    key = re.search(r'<code id="new-key">(mr2_[A-Za-z0-9_-]+)</code>', r.text)
    assert key
    # Shown once: the list shows the prefix only.
    assert key.group(1) not in frank.get("/console/keys").text

    oai = openai.OpenAI(base_url=console.url + "/v1", api_key=key.group(1), max_retries=0)
    reply = oai.chat.completions.create(
        model="chat-vllm", messages=[{"role": "user", "content": "Hello there"}]
    )
    assert reply.usage is not None
    requests = settled(frank, "/console/requests", ">ok<")
    assert "chat-vllm" in requests and f">{reply.usage.prompt_tokens}<" in requests
    usage = frank.get("/console/usage").text
    assert "physics" in usage and "of 5,000" in usage
    assert f"{reply.usage.total_tokens:,}" in usage  # used this period, and lifetime
    assert "<svg" in usage and "chat-vllm" in usage

    key_id = re.search(r"/console/keys/(\d+)/revoke", frank.get("/console/keys").text)
    assert key_id
    r = post(frank, f"/console/keys/{key_id.group(1)}/revoke", "/console/keys")
    assert r.status_code == 303
    with pytest.raises(openai.AuthenticationError):
        oai.chat.completions.create(model="chat-vllm", messages=[{"role": "user", "content": "x"}])


def test_admin_changes_a_users_group_and_a_groups_limits(console: ConsoleStack) -> None:
    console.add_account("grace")
    admin = console.sign_in("root")
    r = post(admin, "/console/admin/users/grace", "/console/admin/users", group="testers")
    assert r.status_code == 303
    r = post(
        admin,
        "/console/admin/groups/testers",
        "/console/admin/groups",
        token_budget="0",
        budget_period_days="30",
        rpm="0",
        max_concurrent="0",
        scheduler_weight="1.5",
    )
    assert r.status_code == 303
    assert 'value="1.5"' in admin.get("/console/admin/groups").text
    r = post(
        admin,
        "/console/admin/groups/testers",
        "/console/admin/groups",
        token_budget="-1",
        budget_period_days="30",
        rpm="0",
        max_concurrent="0",
        scheduler_weight="1",
    )
    assert r.status_code == 400 and "token_budget" in r.text


def test_models_page_has_snippets_with_the_gateway_url(console: ConsoleStack) -> None:
    page = console.sign_in("tester").get("/console/models").text
    assert f'base_url="{console.url}/v1"' in page.replace("&#34;", '"')
    for sdk in ("OpenAI (Python)", "Anthropic (Python)", "Ollama (Python)", "curl"):
        assert sdk in page
    assert "embed-vllm" in page and "/v1/embeddings" in page


def test_backends_drain_and_undrain(console: ConsoleStack) -> None:
    admin = console.sign_in("root")
    assert "vllm-1" in admin.get("/console/admin/backends").text
    r = post(admin, "/console/admin/backends/vllm-1/drain", "/console/admin/backends")
    assert r.status_code == 303
    status = console.session().get("/console/status.json").json()
    chat = next(m for m in status["models"] if m["model"] == "chat-vllm")
    assert chat["up"] is False
    post(admin, "/console/admin/backends/vllm-1/undrain", "/console/admin/backends")
    status = console.session().get("/console/status.json").json()
    chat = next(m for m in status["models"] if m["model"] == "chat-vllm")
    assert chat["up"] is True and chat["queue_depth"] == 0


def test_status_is_public_and_private_free(console: ConsoleStack) -> None:
    anonymous = console.session()
    page = anonymous.get("/console/status")
    assert page.status_code == 200 and "chat-vllm" in page.text
    body = anonymous.get("/console/status.json").json()
    assert set(body["models"][0]) == {
        "model",
        "up",
        "loaded_on",
        "serving_backends",
        "queue_depth",
        "wait_estimate_s",
    }
    text = page.text + str(body)
    for private in ("tester", "root", "127.0.0.1:", "mr2_"):
        assert private not in text


def test_status_lists_only_the_models_every_group_may_use(
    console: ConsoleStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(status_module, "DATABASE_TTL_S", 0.0)  # read the rules at each load
    anonymous = console.session()
    listed = [m["model"] for m in anonymous.get("/console/status.json").json()["models"]]
    kept = listed[-1]  # kept for one group only: every group but that one loses it
    others = [m for m in listed if m != kept]

    async def restrict(models: list[str] | None) -> None:
        stores = open_stores(console.settings.database_url)
        try:
            await stores.directory.update_group("testers", {"models": models})
        finally:
            await stores.aclose()

    console.run(restrict(others))
    try:
        body = anonymous.get("/console/status.json").json()
        assert [m["model"] for m in body["models"]] == others
        assert kept not in anonymous.get("/console/status").text
    finally:
        console.run(restrict(None))
    assert [m["model"] for m in anonymous.get("/console/status.json").json()["models"]] == listed


def test_usage_export_csv(console: ConsoleStack) -> None:
    oai = openai.OpenAI(base_url=console.url + "/v1", api_key=console.key, max_retries=0)
    oai.chat.completions.create(model="chat-ollama", messages=[{"role": "user", "content": "hi"}])
    today = datetime.now(UTC).date().isoformat()
    admin = console.sign_in("root")
    # The record is completed by the audit writer moments after the answer.
    settled(admin, "/console/admin/audit?model=chat-ollama&status=ok", 'badge ok">ok<')
    r = admin.get("/console/admin/usage.csv", params={"since": today, "until": today})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    mine = [x for x in rows if x["user"] == "tester" and x["model"] == "chat-ollama"]
    assert mine and mine[0]["group"] == "testers" and mine[0]["day"] == today
    assert int(mine[0]["requests"]) >= 1 and int(mine[0]["output_tokens"]) > 0


def test_audit_search_filters(console: ConsoleStack) -> None:
    admin = console.sign_in("root")
    r = admin.get("/console/admin/audit", params={"model": "no-such-model"})
    assert "No records match" in r.text
    r = admin.get("/console/admin/audit", params={"status": "bogus"})
    assert r.status_code == 400
    r = admin.get("/console/admin/audit", params={"since": "yesterday"})
    assert r.status_code == 400 and "YYYY-MM-DD" in r.text


def test_models_page_shows_only_what_the_users_group_may_use(console: ConsoleStack) -> None:
    async def narrow() -> None:
        stores = open_stores(console.settings.database_url)
        try:
            await stores.directory.create_group("course", models=["embed-*"])
            await stores.directory.create_user("ines", "course")
        finally:
            await stores.aclose()

    console.run(narrow())
    console.add_account("ines", group="course")
    page = console.sign_in("ines").get("/console/models").text
    assert "embed-vllm" in page and "chat-vllm" not in page
