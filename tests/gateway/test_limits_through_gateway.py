"""Per-user limits through the gateway: refusals before any stream starts, what a cancelled stream
costs, usage across a restart and a period change, and the token budget under concurrency.

One simulated engine behind a gate (see `EngineGate`: requests the gateway admitted wait at the
engine's door until the test opens it) and one gateway in this process, on SQLite, with the limit
counters in Redis under a private prefix. Each test has users of its own, so no test sees
another's counters. The restart test has its own gateway on the in-memory limit store, so what
survives the restart can only have come from the database.

The period rolling over inside the stores is covered in tests/stores (test_usage.py::
test_rollover_resets_the_period_and_keeps_the_lifetime and limits/test_budget.py::
test_period_rolls_over_and_lifetime_does_not); here it is shown once through the gateway.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
from sqlalchemy import select, update

from mindrouter.stores.records import LimitOverrides
from mindrouter.stores.sql.schema import usage as usage_table
from mindrouter.stores.sql.schema import users as users_table
from tests.gateway.databases import fresh_database, redis_namespace, stores_at
from tests.gateway.procs import (
    DIALECTS,
    MODEL,
    PATHS,
    EngineGate,
    Rig,
    bearer,
    chat_body,
    http,
    start_rig,
    text_of_chunk,
)
from tests.stores.conftest import run_in_thread

GROUPS: list[dict[str, Any]] = [
    {"name": "free"},
    {"name": "rpm1", "rpm": 1},
    {"name": "solo", "max_concurrent": 1},
    {"name": "budget", "token_budget": 1000},
    {"name": "tiny", "token_budget": 1},
]
DAY = 86_400
RETRY_AFTER = re.compile(r"[1-9][0-9]*")


@dataclass
class Setup:
    rig: Rig
    gate: EngineGate
    database_url: str
    admin_key: str

    @property
    def url(self) -> str:
        return self.rig.url

    def user(self, group: str, *, budget: int | None = None, used: int = 0) -> tuple[str, str]:
        """A new user in `group` (optionally with its own budget and tokens already used this
        period); returns (name, key)."""
        name = f"{group}-{secrets.token_hex(4)}"
        return name, run_in_thread(_new_user(self.database_url, name, group, budget, used))

    def usage(self, key: str) -> dict[str, Any]:
        return usage_of(self.url, key)

    def settled_usage(self, key: str) -> dict[str, Any]:
        return settled_usage(self.url, key)

    def audit(self, user: str, timeout: float = 10) -> list[dict[str, Any]]:
        """The user's audit entries, once none is pending."""
        deadline = time.monotonic() + timeout
        while True:
            r = http.get(
                self.url + "/admin/audit",
                params={"user": user},
                headers=bearer(self.admin_key),
                timeout=10,
            )
            assert r.status_code == 200, r.text
            entries: list[dict[str, Any]] = r.json()
            if all(e["status"] != "pending" for e in entries):
                return entries
            assert time.monotonic() < deadline, f"audit records still pending: {entries}"
            time.sleep(0.05)


def usage_of(url: str, key: str) -> dict[str, Any]:
    r = http.get(url + "/v1/usage", headers=bearer(key), timeout=10)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def settled_usage(url: str, key: str, timeout: float = 10) -> dict[str, Any]:
    """GET /v1/usage once nothing of the user's is in flight any more."""
    deadline = time.monotonic() + timeout
    while True:
        usage = usage_of(url, key)
        if usage["in_flight"] == 0 and usage["reserved_tokens"] == 0:
            return usage
        assert time.monotonic() < deadline, f"never settled: {usage}"
        time.sleep(0.02)


async def _new_user(url: str, name: str, group: str, budget: int | None, used: int) -> str:
    async with stores_at(url) as stores:
        user = await stores.directory.create_user(
            name, group, overrides=LimitOverrides(token_budget=budget)
        )
        if used:
            await stores.usage.add_usage(user.id, used, datetime.now(UTC))
        return (await stores.keys.create_key(name)).key


async def _admin_key(url: str) -> str:
    async with stores_at(url) as stores:
        return (await stores.keys.create_key("ops", admin=True)).key


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("limits")
    gates: list[EngineGate] = []

    def wrap(app: Any) -> EngineGate:
        gates.append(EngineGate(app))
        return gates[0]

    with fresh_database("sqlite", tmp) as url, redis_namespace() as redis:
        rig = start_rig(
            url,
            groups=GROUPS,
            users=[{"name": "ops", "group": "free"}],
            wrap=wrap,
            redis_url=redis.url,
            redis_prefix=redis.prefix,
        )
        try:
            yield Setup(rig, gates[0], url, run_in_thread(_admin_key(url)))
        finally:
            rig.close()


# -- 429 before a stream starts ------------------------------------------------------------------


def _assert_raw_refusal(setup: Setup, dialect: str, key: str, says: str) -> httpx.Response:
    """A streaming request refused over plain HTTP: a 429 JSON error, never a stream."""
    body = chat_body(dialect, stream=True)
    with http.stream(
        "POST", setup.url + PATHS[dialect], json=body, headers=bearer(key), timeout=30
    ) as r:
        r.read()
    assert r.status_code == 429, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert RETRY_AFTER.fullmatch(r.headers["retry-after"]), r.headers["retry-after"]
    error = r.json()
    if dialect == "openai":
        assert error["error"]["type"] == "rate_limit_error"
        message = error["error"]["message"]
    elif dialect == "anthropic":
        assert error["type"] == "error"
        assert error["error"]["type"] == "rate_limit_error"
        message = error["error"]["message"]
    else:
        assert set(error) == {"error"}
        message = error["error"]
    assert says in message, message
    return r


def _assert_sdk_refusal(setup: Setup, dialect: str, key: str) -> None:
    """The official SDK's streaming call raises its rate-limit error (no retries)."""
    messages: Any = [{"role": "user", "content": "hi"}]  # each SDK has its own TypedDicts
    if dialect == "openai":
        oai = openai.OpenAI(base_url=setup.url + "/v1", api_key=key, max_retries=0)
        with pytest.raises(openai.RateLimitError) as oai_err:
            oai.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, stream=True)
        assert oai_err.value.status_code == 429
        assert RETRY_AFTER.fullmatch(oai_err.value.response.headers["retry-after"])
    elif dialect == "anthropic":
        claude = anthropic.Anthropic(base_url=setup.url + "/anthropic", api_key=key, max_retries=0)
        with pytest.raises(anthropic.RateLimitError) as claude_err:
            claude.messages.create(model=MODEL, messages=messages, max_tokens=8, stream=True)
        assert claude_err.value.status_code == 429
        assert RETRY_AFTER.fullmatch(claude_err.value.response.headers["retry-after"])
    else:
        client = ollama.Client(host=setup.url, headers=bearer(key))
        with pytest.raises(ollama.ResponseError) as ollama_err:
            next(iter(client.chat(model=MODEL, messages=messages, stream=True)))
        assert ollama_err.value.status_code == 429


def _stream_fully(setup: Setup, dialect: str, key: str) -> None:
    body = chat_body(dialect, stream=True)
    with http.stream(
        "POST", setup.url + PATHS[dialect], json=body, headers=bearer(key), timeout=30
    ) as r:
        assert r.status_code == 200, r.read()
        r.read()


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("limit", ["rpm", "concurrency", "budget"])
def test_a_stream_over_a_limit_is_refused_with_429_before_it_starts(
    setup: Setup, limit: str, dialect: str
) -> None:
    records_before = len(setup.rig.sim_state.records)
    if limit == "rpm":
        _, key = setup.user("rpm1")
        _stream_fully(setup, dialect, key)  # the one request this minute allows
        says, reached = "per minute", 1
    elif limit == "budget":
        _, key = setup.user("budget", used=1000)  # the period's budget is used up
        says, reached = "budget used up", 0
    else:
        _, key = setup.user("solo")
        says, reached = "concurrent", 1
    held = None
    try:
        if limit == "concurrency":
            setup.gate.open.clear()  # the first request stays in flight at the engine's door
            held = _start_and_hold(setup, dialect, key)
        _assert_sdk_refusal(setup, dialect, key)
        r = _assert_raw_refusal(setup, dialect, key, says)
    finally:
        setup.gate.open.set()
        if held is not None:
            held.join(30)
    retry_after = int(r.headers["retry-after"])
    if limit == "budget":
        assert retry_after > 29 * DAY  # when the period ends, not in a second
    elif limit == "concurrency":
        assert retry_after == 1
    else:
        assert retry_after <= 60
    # Refused requests never reach the engine.
    assert len(setup.rig.sim_state.records) - records_before == reached


def _start_and_hold(setup: Setup, dialect: str, key: str) -> threading.Thread:
    """Starts a streaming request in a thread; returns once the gateway has it in flight (it
    then waits at the closed engine gate)."""
    thread = threading.Thread(target=_stream_fully, args=(setup, dialect, key), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while setup.usage(key)["in_flight"] != 1:
        assert time.monotonic() < deadline, "the first request never got in flight"
        time.sleep(0.01)
    return thread


# -- what a cancelled stream costs ---------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_stream_the_client_leaves_is_charged_what_was_generated(
    setup: Setup, dialect: str
) -> None:
    name, key = setup.user("free")
    nonce = secrets.token_hex(8)
    config = setup.rig.sim_state.config
    config.tokens_per_second = 10.0
    received = 0
    try:
        body = chat_body(dialect, stream=True, max_tokens=60, text=f"go on {nonce}")
        with http.stream(
            "POST", setup.url + PATHS[dialect], json=body, headers=bearer(key), timeout=30
        ) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if text_of_chunk(dialect, line) is not None:
                    received += 1
                    if received == 3:
                        break
        usage = setup.settled_usage(key)
        (entry,) = setup.audit(name)
    finally:
        config.tokens_per_second = 0.0
    (engine,) = [r for r in setup.rig.sim_state.records if nonce in json.dumps(r.body)]
    assert engine.cancelled_at is not None, "the engine never saw the client leave"
    generated = engine.completion_tokens
    print(
        f"\n{dialect}: client read {received}, engine generated {generated}, audit "
        f"{entry['input_tokens']}+{entry['output_tokens']}, period_tokens {usage['period_tokens']}"
    )
    assert received <= generated < 60
    assert entry["status"] == "cancelled"
    assert abs(entry["output_tokens"] - generated) <= 1
    # Usage holds the prompt and exactly what the audit says was generated, nothing reserved.
    assert usage["period_tokens"] == entry["input_tokens"] + entry["output_tokens"]
    assert usage["lifetime_tokens"] == usage["period_tokens"]
    assert abs(usage["period_tokens"] - entry["input_tokens"] - generated) <= 1


# -- the budget at its edge ----------------------------------------------------------------------


def _reservation(setup: Setup, body: dict[str, Any]) -> int:
    """What the gateway reserves for `body`: it says so when it is more than a whole budget."""
    _, key = setup.user("tiny")
    r = http.post(setup.url + PATHS["openai"], json=body, headers=bearer(key), timeout=10)
    assert r.status_code == 429, r.text
    found = re.search(r"needs about (\d+) tokens", r.json()["error"]["message"])
    assert found, r.text
    return int(found.group(1))


async def _concurrently(
    setup: Setup, key: str, body: dict[str, Any], n: int
) -> list[httpx.Response]:
    async with httpx.AsyncClient(headers=bearer(key), timeout=60) as client:
        arrived = setup.gate.arrived
        done: list[httpx.Response] = []

        async def one() -> httpx.Response:
            r = await client.post(setup.url + PATHS["openai"], json=body)
            done.append(r)
            return r

        async def open_when_settled() -> None:
            # Every request has been answered or waits at the engine: all were decided while
            # the admitted ones were in flight.
            deadline = time.monotonic() + 30
            while len(done) + setup.gate.arrived - arrived < n and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            setup.gate.open.set()

        setup.gate.open.clear()
        try:
            opener = asyncio.ensure_future(open_when_settled())
            responses = await asyncio.gather(*(one() for _ in range(n)))
            await opener
        finally:
            setup.gate.open.set()
        return responses


@pytest.mark.parametrize(
    ("reservations", "slack"),
    [(1, "one"), (3, "half"), (3, "none")],
    ids=["just-above-one", "three-and-a-half", "exactly-three"],
)
def test_concurrent_requests_cannot_overshoot_the_budget_beyond_their_reservations(
    setup: Setup, reservations: int, slack: str
) -> None:
    """Budget B = k·r + s for a reservation of r tokens per request (prompt estimate plus
    max_tokens) and 0 <= s < r; 20 identical requests at once, decided while the admitted ones
    are held in flight.

    Admission: each admit counts the reservations of those in flight, so at most
    floor(B / r) = k run at once, and exactly k are admitted; the others get 429.
    Settlement: each admitted request is charged what it really used (u_i), so after all settle
    period_tokens = Σ u_i <= B + Σ max(0, u_i - r): the budget is overshot by at most what the
    in-flight requests used beyond their reservations (zero when max_tokens is honoured and the
    prompt estimate is not low).
    """
    body = chat_body("openai", stream=False, max_tokens=16, text="count my tokens")
    r = _reservation(setup, body)
    budget = reservations * r + {"one": 1, "half": r // 2, "none": 0}[slack]
    name, key = setup.user("free", budget=budget)
    responses = asyncio.run(_concurrently(setup, key, body, 20))

    statuses = Counter(x.status_code for x in responses)
    assert statuses == {200: reservations, 429: 20 - reservations}, statuses
    for x in responses:
        if x.status_code == 429:
            assert RETRY_AFTER.fullmatch(x.headers["retry-after"])
            assert "held by requests in flight" in x.json()["error"]["message"]
    usage = setup.settled_usage(key)
    used = [e["input_tokens"] + e["output_tokens"] for e in setup.audit(name)]
    assert len(used) == reservations
    assert usage["period_tokens"] == sum(used)
    overshoot_allowed = sum(max(0, u - r) for u in used)
    print(
        f"\nreservation {r}, budget {budget}: admitted {reservations}, used {used}, "
        f"period_tokens {usage['period_tokens']}, allowed overshoot {overshoot_allowed}"
    )
    assert usage["period_tokens"] <= budget + overshoot_allowed
    assert usage["remaining_tokens"] == max(0, budget - usage["period_tokens"])
    # With the period's remainder below one reservation, the next request is over the budget
    # itself, and told to come back when the period ends.
    if budget - usage["period_tokens"] < r:
        refused = http.post(setup.url + PATHS["openai"], json=body, headers=bearer(key))
        assert refused.status_code == 429
        assert "budget used up" in refused.json()["error"]["message"]
        assert int(refused.headers["retry-after"]) > 29 * DAY


# -- usage across a restart and a new period -----------------------------------------------------


async def _move_period_back(url: str, user: str, days: int) -> None:
    """Moves the user's budget period `days` into the past, as if that much time had passed."""
    async with stores_at(url) as stores, stores.engine.begin() as conn:
        uid = (await conn.execute(select(users_table.c.id).where(users_table.c.name == user))).one()
        row = (await conn.execute(select(usage_table).where(usage_table.c.user_id == uid.id))).one()
        await conn.execute(
            update(usage_table)
            .where(usage_table.c.user_id == uid.id)
            .values(period_start=row.period_start - timedelta(days=days))
        )


def test_usage_survives_a_restart_and_resets_with_the_period(tmp_path: Path) -> None:
    with fresh_database("sqlite", tmp_path) as url:
        rig = start_rig(
            url,
            groups=[{"name": "capped", "token_budget": 200, "budget_period_days": 30}],
            users=[{"name": "rhea", "group": "capped"}],
        )
        try:
            key = run_in_thread(_user_key(url, "rhea"))
            body = chat_body("openai", stream=False, max_tokens=16)
            admitted = 0
            while True:
                r = http.post(rig.url + PATHS["openai"], json=body, headers=bearer(key))
                if r.status_code != 200:
                    break
                admitted += 1
                assert admitted < 50
            assert r.status_code == 429 and admitted > 0
            before = settled_usage(rig.url, key)
            assert before["period_tokens"] == before["lifetime_tokens"] > 0

            rig.restart_gateway()
            after = usage_of(rig.url, key)
            for field in ("period_tokens", "lifetime_tokens"):
                assert after[field] == before[field], field
            # Still over the budget: the restarted gateway enforces what the database kept.
            r = http.post(rig.url + PATHS["openai"], json=body, headers=bearer(key))
            assert r.status_code == 429
            assert "budget used up" in r.json()["error"]["message"]

            # A period and a day later: the period's count starts again, the lifetime does not.
            rig.restart_gateway(lambda: run_in_thread(_move_period_back(url, "rhea", 31)))
            later = usage_of(rig.url, key)
            assert later["period_tokens"] == 0
            assert later["lifetime_tokens"] == before["lifetime_tokens"]
            r = http.post(rig.url + PATHS["openai"], json=body, headers=bearer(key))
            assert r.status_code == 200, r.text
            spent = r.json()["usage"]["total_tokens"]
            final = settled_usage(rig.url, key)
            assert final["period_tokens"] == spent
            assert final["lifetime_tokens"] == before["lifetime_tokens"] + spent
        finally:
            rig.close()


async def _user_key(url: str, user: str) -> str:
    async with stores_at(url) as stores:
        return (await stores.keys.create_key(user)).key


def test_the_budget_period_keeps_its_start_across_a_restart(tmp_path: Path) -> None:
    with fresh_database("sqlite", tmp_path) as url:
        rig = start_rig(url, groups=[{"name": "g"}], users=[{"name": "rhea", "group": "g"}])
        try:
            key = run_in_thread(_user_key(url, "rhea"))
            body = chat_body("openai", stream=False)
            assert http.post(rig.url + PATHS["openai"], json=body, headers=bearer(key)).is_success
            before = settled_usage(rig.url, key)
            time.sleep(0.05)  # so that a start taken at shutdown differs visibly
            rig.restart_gateway()
            after = usage_of(rig.url, key)
        finally:
            rig.close()
    assert after["period_tokens"] == before["period_tokens"]
    moved = datetime.fromisoformat(after["period_start"]) - datetime.fromisoformat(
        before["period_start"]
    )
    assert abs(moved.total_seconds()) < 0.001, f"period_start moved by {moved}"
