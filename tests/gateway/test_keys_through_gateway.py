"""API keys through the gateway's three dialects: accepted in every header spelling clients use,
refused with 401 in the dialect's own error shape (and as the official SDKs' auth errors) when
missing, malformed, unknown, revoked, expired or belonging to a deactivated user.

One simulated engine and one gateway in this process over a fresh SQLite database. Revocation
reaching other processes is in test_two_processes.py.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from tests.gateway.databases import fresh_database, stores_at
from tests.gateway.procs import DIALECTS, MODEL, PATHS, Rig, chat_body, http, start_rig
from tests.stores.conftest import run_in_thread

# Typed loosely: each SDK wants its own TypedDicts for the same JSON.
USER: Any = [{"role": "user", "content": "hi"}]
# Each dialect's generation endpoint and a body that works with a good key.
ENTRIES: dict[str, tuple[str, dict[str, Any]]] = {
    d: (PATHS[d], chat_body(d, stream=False, max_tokens=4)) for d in DIALECTS
}


@dataclass
class Keys:
    valid: str
    revoked: str
    expired: str
    inactive: str  # the user's account is deactivated

    @property
    def unknown(self) -> str:
        return "mr2_" + secrets.token_urlsafe(32)

    @property
    def wrong_secret(self) -> str:
        # A real key's prefix (so the row is found) with another secret.
        return self.valid[:12] + secrets.token_urlsafe(32)[: len(self.valid) - 12]


@dataclass
class Setup:
    rig: Rig
    database_url: str
    keys: Keys


async def _prepare(url: str) -> Keys:
    past = datetime.now(UTC) - timedelta(minutes=1)
    async with stores_at(url) as stores:
        valid = (await stores.keys.create_key("alice")).key
        revoked = (await stores.keys.create_key("alice")).key
        await stores.keys.revoke_key(revoked)
        expired = (await stores.keys.create_key("alice", expires_at=past)).key
        await stores.directory.create_user("bob", "testers")
        inactive = (await stores.keys.create_key("bob")).key
        await stores.directory.update_user("bob", {"active": False})
    return Keys(valid, revoked, expired, inactive)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("keys")
    with fresh_database("sqlite", tmp) as url:
        rig = start_rig(
            url,
            groups=[{"name": "testers"}],
            users=[{"name": "alice", "group": "testers"}],
        )
        try:
            yield Setup(rig, url, run_in_thread(_prepare(url)))
        finally:
            rig.close()


def _post(setup: Setup, dialect: str, headers: dict[str, str]) -> httpx.Response:
    path, body = ENTRIES[dialect]
    return http.post(setup.rig.url + path, json=body, headers=headers, timeout=30)


def _assert_auth_error(dialect: str, r: httpx.Response, says: str) -> None:
    assert r.status_code == 401, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    if dialect == "openai":
        assert body["error"]["type"] == "authentication_error"
        assert body["error"]["code"] == "invalid_api_key"
        message = body["error"]["message"]
    elif dialect == "anthropic":
        assert body["type"] == "error"
        assert body["error"]["type"] == "authentication_error"
        assert body["request_id"] == r.headers["request-id"]
        message = body["error"]["message"]
    else:
        assert set(body) == {"error"} and isinstance(body["error"], str)
        message = body["error"]
    assert says in message, message


# -- accepted ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("header", ["Authorization", "X-API-Key", "x-api-key"])
def test_a_new_key_works_in_every_header_spelling(setup: Setup, dialect: str, header: str) -> None:
    key = setup.keys.valid
    value = f"Bearer {key}" if header == "Authorization" else key
    before = len(setup.rig.sim_state.records)
    r = _post(setup, dialect, {header: value})
    assert r.status_code == 200, r.text
    assert len(setup.rig.sim_state.records) == before + 1
    usage = http.get(setup.rig.url + "/v1/usage", headers={header: value}, timeout=10)
    assert usage.status_code == 200
    assert usage.json()["user"] == "alice"


# -- refused -----------------------------------------------------------------------------------

# case -> (headers from the keys, what the message says)
CASES: dict[str, tuple[Any, str]] = {
    "missing": (lambda k: {}, "missing API key"),
    "not-bearer": (lambda k: {"Authorization": f"Basic {k.valid}"}, "malformed API key"),
    "bearer-no-key": (lambda k: {"Authorization": "Bearer"}, "malformed API key"),
    "not-a-key": (lambda k: {"Authorization": "Bearer sk-abc123"}, "malformed API key"),
    "short-key": (lambda k: {"x-api-key": "mr2_short"}, "malformed API key"),
    "bad-characters": (lambda k: {"X-API-Key": k.valid[:-1] + "!"}, "malformed API key"),
    "unknown": (lambda k: {"Authorization": f"Bearer {k.unknown}"}, "invalid API key"),
    "wrong-secret": (lambda k: {"x-api-key": k.wrong_secret}, "invalid API key"),
    "revoked": (lambda k: {"Authorization": f"Bearer {k.revoked}"}, "API key revoked"),
    "expired": (lambda k: {"X-API-Key": k.expired}, "API key expired"),
    "inactive-user": (lambda k: {"Authorization": f"Bearer {k.inactive}"}, "inactive"),
}


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("case", list(CASES))
def test_refused_in_the_dialects_error_shape(setup: Setup, dialect: str, case: str) -> None:
    headers_of, says = CASES[case]
    headers = headers_of(setup.keys)
    before = len(setup.rig.sim_state.records)
    r = _post(setup, dialect, headers)
    _assert_auth_error(dialect, r, says)
    # Nothing of the key is echoed, and nothing reached the engine.
    for value in headers.values():
        token = value.removeprefix("Bearer ").removeprefix("Basic ")
        if len(token) > 12:
            assert token not in r.text
    assert len(setup.rig.sim_state.records) == before


SDK_CASES = ("unknown", "revoked", "expired", "inactive-user")


def _sdk_key(keys: Keys, case: str) -> str:
    return {
        "unknown": keys.unknown,
        "revoked": keys.revoked,
        "expired": keys.expired,
        "inactive-user": keys.inactive,
    }[case]


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("case", SDK_CASES)
def test_sdks_raise_their_authentication_errors(setup: Setup, case: str, stream: bool) -> None:
    key = _sdk_key(setup.keys, case)
    url = setup.rig.url

    # OpenAI: Authorization: Bearer.
    oai = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as oai_err:
        oai.chat.completions.create(model=MODEL, messages=USER, max_tokens=4, stream=stream)
    assert oai_err.value.status_code == 401
    assert oai_err.value.type == "authentication_error"

    # Anthropic: x-api-key.
    claude = anthropic.Anthropic(base_url=url + "/anthropic", api_key=key, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as claude_err:
        claude.messages.create(model=MODEL, messages=USER, max_tokens=4, stream=stream)
    assert claude_err.value.status_code == 401
    body = claude_err.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "authentication_error"

    # Ollama: whatever headers the client is given.
    client = ollama.Client(host=url, headers={"Authorization": f"Bearer {key}"})
    with pytest.raises(ollama.ResponseError) as ollama_err:
        if stream:
            next(client.chat(model=MODEL, messages=USER, stream=True))
        else:
            client.chat(model=MODEL, messages=USER, stream=False)
    assert ollama_err.value.status_code == 401
    assert ollama_err.value.error


# -- changes to a key in use -------------------------------------------------------------------


async def _new_key(url: str, user: str | None = None) -> str:
    async with stores_at(url) as stores:
        if user is not None:
            await stores.directory.create_user(user, "testers")
        return (await stores.keys.create_key(user or "alice")).key


async def _change(url: str, change: str, key: str, user: str) -> None:
    async with stores_at(url) as stores:
        if change == "revoke":
            await stores.keys.revoke_key(key)
        elif change == "expire":
            await stores.keys.set_key_expiry(key, datetime.now(UTC) - timedelta(seconds=1))
        else:
            await stores.directory.update_user(user, {"active": False})


@pytest.mark.parametrize(
    ("change", "says"),
    [("revoke", "API key revoked"), ("expire", "API key expired"), ("deactivate", "inactive")],
    ids=["revoke", "expire", "deactivate"],
)
def test_a_key_in_use_stops_working_when_changed(setup: Setup, change: str, says: str) -> None:
    """A key that works (and so sits in the gateway's cache) is refused soon after the change,
    in each dialect; the bound across processes is measured in test_two_processes.py."""
    user = f"carol-{change}"
    key = run_in_thread(_new_key(setup.database_url, user))
    for dialect in DIALECTS:
        assert _post(setup, dialect, {"Authorization": f"Bearer {key}"}).status_code == 200
    run_in_thread(_change(setup.database_url, change, key, user))
    deadline = time.monotonic() + 5
    while True:
        r = http.get(setup.rig.url + "/v1/models", headers={"x-api-key": key}, timeout=10)
        if r.status_code == 401 or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert r.status_code == 401, "the change never reached the gateway"
    for dialect in DIALECTS:
        _assert_auth_error(dialect, _post(setup, dialect, {"Authorization": f"Bearer {key}"}), says)
