"""Model access per group, through the gateway: a group limited to one model sees only it in
every listing, and a request for any other model gets the dialect's model-not-found answer,
byte for byte the one a model that does not exist gets; the audit trail records the refusal."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import select

from mindrouter.app import build_app
from mindrouter.identity.access import ModelAccess, may_use
from mindrouter.routing.catalog import ModelSpec
from mindrouter.serving import ThreadServer
from mindrouter.settings import settings_from_dict
from mindrouter.sim import build_sim_app
from mindrouter.stores.sql import open_stores
from mindrouter.stores.sql.schema import audit_records
from tests.gateway.stack import (
    SIM_ENGINES,
    Stack,
    gateway_config,
    prepare_database,
    sim_config,
    sqlite_url,
)

ALLOWED = "chat-vllm"
FORBIDDEN = "chat-ollama"  # served, but not to the limited group
MISSING = "no-such-model"


@pytest.fixture(scope="module")
def limited() -> Iterator[Stack]:
    sims = {e: ThreadServer(build_sim_app(sim_config(e))).start() for e in SIM_ENGINES}
    url = sqlite_url()
    config = gateway_config(
        {e: s.url for e, s in sims.items()},
        database_url=url,
        groups=[{"name": "testers"}, {"name": "course", "models": [ALLOWED]}],
        users=[{"name": "tester", "group": "testers"}, {"name": "student", "group": "course"}],
    )
    settings = settings_from_dict(config)
    key = asyncio.run(prepare_database(settings, user="student"))
    app = build_app(settings)
    gateway = ThreadServer(app).start()
    stack = Stack(gateway, sims, {}, settings, app, key=key, database_url=url)
    yield stack
    stack.close()


def get(stack: Stack, path: str, **headers: str) -> httpx.Response:
    return httpx.get(stack.url + path, headers=stack.auth | headers, timeout=30)


def post(stack: Stack, path: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(stack.url + path, headers=stack.auth, json=body, timeout=30)


def test_every_listing_shows_only_the_allowed_model(limited: Stack) -> None:
    openai_ids = [m["id"] for m in get(limited, "/v1/models").json()["data"]]
    anthropic_ids = [m["id"] for m in get(limited, "/anthropic/v1/models").json()["data"]]
    root_ids = [
        m["id"]
        for m in get(limited, "/v1/models", **{"anthropic-version": "2023-06-01"}).json()["data"]
    ]
    tags = [m["name"] for m in get(limited, "/api/tags").json()["models"]]
    assert openai_ids == anthropic_ids == root_ids == [ALLOWED]
    assert [t.removesuffix(":latest") for t in tags] == [ALLOWED]


def chat_request(dialect: str, model: str) -> tuple[str, dict[str, object]]:
    messages = [{"role": "user", "content": "hi"}]
    if dialect == "openai":
        return "/v1/chat/completions", {"model": model, "messages": messages}
    if dialect == "anthropic":
        return "/anthropic/v1/messages", {"model": model, "messages": messages, "max_tokens": 8}
    return "/api/chat", {"model": model, "messages": messages, "stream": False}


def without_ids(text: str, model: str) -> object:
    """The error body with the model's name and per-request ids taken out."""
    body = json.loads(text.replace(model, "MODEL"))
    if isinstance(body, dict):
        body.pop("request_id", None)
    return body


@pytest.mark.parametrize("dialect", ["openai", "anthropic", "ollama"])
def test_a_forbidden_model_is_answered_as_a_missing_one(limited: Stack, dialect: str) -> None:
    path, body = chat_request(dialect, FORBIDDEN)
    refused = post(limited, path, body)
    path, body = chat_request(dialect, MISSING)
    missing = post(limited, path, body)
    assert refused.status_code == missing.status_code == 404
    assert without_ids(refused.text, FORBIDDEN) == without_ids(missing.text, MISSING)
    path, body = chat_request(dialect, ALLOWED)
    assert post(limited, path, body).status_code == 200


def test_single_model_lookups_refuse_the_forbidden_model(limited: Stack) -> None:
    assert get(limited, f"/v1/models/{ALLOWED}").status_code == 200
    assert get(limited, f"/v1/models/{FORBIDDEN}").status_code == 404
    assert post(limited, "/api/show", {"model": FORBIDDEN}).status_code == 404
    assert post(limited, "/v1/embeddings", {"model": "embed-vllm", "input": "x"}).status_code == 404


def test_the_refusal_is_audited(limited: Stack) -> None:
    path, body = chat_request("openai", FORBIDDEN)
    assert post(limited, path, body).status_code == 404

    async def rows() -> list[tuple[str, str, str | None]]:
        stores = open_stores(limited.database_url)
        try:
            async with stores.engine.connect() as conn:
                found = await conn.execute(
                    select(
                        audit_records.c.model, audit_records.c.status, audit_records.c.error_message
                    ).where(audit_records.c.user_name == "student")
                )
                return [tuple(r) for r in found]  # type: ignore[misc]
        finally:
            await stores.aclose()

    deadline = 50
    for _ in range(deadline):
        # The record is inserted pending and closed a moment later (completions are batched).
        found = [r for r in asyncio.run(rows()) if r[0] == FORBIDDEN]
        if found and all(r[1] != "pending" for r in found):
            break
        asyncio.run(asyncio.sleep(0.1))
    assert (
        "chat-ollama",
        "error",
        "model 'chat-ollama' is not available to group 'course'",
    ) in found


def test_patterns_match_names_and_aliases() -> None:
    spec = ModelSpec("qwen3-8b", aliases=("qwen3:8b",))
    assert may_use([ModelAccess(("qwen3-*",))], spec)
    assert may_use([ModelAccess(("qwen3:*",))], spec)
    assert not may_use([ModelAccess(("llama-*",))], spec)
    assert may_use([ModelAccess()], spec)
    # Every rule must allow it: a narrower holder can only take models away.
    assert not may_use([ModelAccess(), ModelAccess(("llama-*",))], spec)
