"""Usage is durable however a gateway ends, and budgets survive Redis losing its data.

- Without Redis, a gateway killed (SIGKILL) right after its requests finished has already
  charged their tokens to the database: they are charged when the audit record is closed, in
  the same transaction, so the restarted gateway sees the user's whole usage.
- A Redis restarted empty (its own redis-server here, on another port) no longer holds the
  `seeded` marker of any user: the next admission reloads the user's usage from the database
  before deciding, so a user at their budget stays refused (and the last minute of admissions
  is restored from the audit trail). The usage views reload it the same way: they show the
  durable figure at once, never the zeros of counters that started again.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import redis
from bench.harness import OwnRedis
from sqlalchemy import select

from mindrouter.serving import ThreadServer
from mindrouter.stores.sql.schema import audit_records
from tests.gateway.databases import fresh_database, stores_at
from tests.gateway.procs import (
    GatewayProcess,
    bearer,
    chat_body,
    cli,
    gateway_config,
    http,
    sim_app,
    start_rig,
    write_config,
)
from tests.stores.conftest import run_in_thread

BUDGET = 200


async def _key(url: str) -> tuple[str, int]:
    async with stores_at(url) as stores:
        created = await stores.keys.create_key("u")
        return created.key, (await stores.directory.get_user("u")).id


async def _pending(url: str) -> int:
    async with stores_at(url) as stores, stores.engine.connect() as conn:
        rows = (await conn.execute(select(audit_records.c.status))).scalars().all()
    return sum(1 for status in rows if status == "pending")


async def _charged(url: str, user_id: int) -> tuple[int, int]:
    """The user's lifetime usage and the tokens of their closed records."""
    async with stores_at(url) as stores:
        lifetime = (await stores.usage.get_usage(user_id)).lifetime_tokens
        async with stores.engine.connect() as conn:
            rows = (await conn.execute(select(audit_records))).all()
    assert all(r.status == "ok" for r in rows)
    return lifetime, sum((r.input_tokens or 0) + (r.output_tokens or 0) for r in rows)


def _usage(url: str, key: str, path: str = "/v1/usage") -> dict[str, Any]:
    answer = http.get(url + path, headers=bearer(key))
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _usage_after_loss(url: str, key: str, path: str) -> dict[str, Any]:
    """The usage view once Redis answers again (the first calls may meet dropped connections:
    503, the store being retried a second after a failure)."""
    for _ in range(100):  # bounded
        answer = http.get(url + path, headers=bearer(key))
        assert answer.status_code in (200, 503), answer.text
        if answer.status_code == 200:
            body: dict[str, Any] = answer.json()
            return body
        time.sleep(0.1)
    raise AssertionError(f"{path} never answered after Redis came back")


def test_a_killed_gateway_without_redis_has_charged_what_it_served(tmp_path: Path) -> None:
    sim = ThreadServer(sim_app(default_tokens=7)).start()
    try:
        with fresh_database("sqlite", tmp_path, migrated=False) as url:
            config = write_config(
                tmp_path / "mindrouter.yaml",
                gateway_config(
                    sim.url, url, groups=[{"name": "g"}], users=[{"name": "u", "group": "g"}]
                ),
            )
            cli("migrate", "--config", str(config))
            gateway = GatewayProcess(config, tmp_path / "a.log").start()
            try:
                gateway.wait_ready()
                key, user_id = run_in_thread(_key(url))
                for _ in range(6):
                    body = chat_body("openai", stream=False, max_tokens=7)
                    answer = http.post(
                        gateway.url + "/v1/chat/completions", json=body, headers=bearer(key)
                    )
                    assert answer.status_code == 200, answer.text
                used = _usage(gateway.url, key)["period_tokens"]
                # Killed with no chance to flush anything, once the records are closed (the
                # writer gathers outcomes for 50 ms; a kill inside that window leaves the
                # record to the sweeper).
                for _ in range(100):  # bounded
                    if run_in_thread(_pending(url)) == 0:
                        break
                assert gateway._proc is not None
                gateway._proc.send_signal(signal.SIGKILL)
                gateway._proc.wait(10)
                lifetime, recorded = run_in_thread(_charged(url, user_id))
                assert lifetime == recorded == used > 0

                again = GatewayProcess(config, tmp_path / "b.log").start()
                try:
                    again.wait_ready()
                    assert _usage(again.url, key)["period_tokens"] == used
                finally:
                    again.stop()
            finally:
                gateway.stop()
    finally:
        sim.stop()


def test_redis_restarted_empty_reloads_the_budget_from_the_database(tmp_path: Path) -> None:
    own = OwnRedis(tmp_path / "redis").start()
    try:
        with fresh_database("postgresql", tmp_path) as url:
            rig = start_rig(
                url,
                groups=[{"name": "g", "token_budget": BUDGET}],
                users=[{"name": "u", "group": "g"}],
                redis_url=own.url,
            )
            try:
                key, user_id = run_in_thread(_key(url))
                body = chat_body("openai", stream=False, max_tokens=20)
                statuses = []
                for _ in range(40):  # bounded: the budget runs out long before
                    answer = http.post(
                        rig.url + "/v1/chat/completions", json=body, headers=bearer(key)
                    )
                    statuses.append(answer.status_code)
                    if answer.status_code == 429:
                        assert "budget" in answer.text.lower(), answer.text
                        break
                assert statuses[-1] == 429 and statuses.count(200) >= 2
                used = _usage(rig.url, key)["period_tokens"]

                own.restart_empty()

                refused = None
                for _ in range(100):  # the first calls may meet the dropped connections
                    answer = http.post(
                        rig.url + "/v1/chat/completions", json=body, headers=bearer(key)
                    )
                    assert answer.status_code in (429, 503), answer.text
                    if answer.status_code == 429:
                        refused = answer
                        break
                    time.sleep(0.1)  # the store is retried a second after a failure
                assert refused is not None and "budget" in refused.text.lower(), refused
                assert rig.app.state.runtime.usage.reloads >= 1
                # With the usage came the last minute's admissions, from the audit trail, so the
                # per-minute limit does not start again from zero either.
                client = redis.Redis.from_url(own.url)
                window = client.zcard(f"mr:limits:window:user:{user_id}")
                client.close()
                assert window >= statuses.count(200)
                assert _usage(rig.url, key)["period_tokens"] == used
                lifetime, recorded = run_in_thread(_charged(url, user_id))
                assert lifetime == recorded == used
            finally:
                rig.close()
    finally:
        own.stop()


async def _keys(url: str) -> tuple[str, str]:
    async with stores_at(url) as stores:
        user = (await stores.keys.create_key("u")).key
        return user, (await stores.keys.create_key("ops", admin=True)).key


def test_usage_views_reload_what_redis_lost_before_any_admission(tmp_path: Path) -> None:
    """Redis restarted empty, then flushed: `/v1/usage` and `/admin/usage/{user}`, asked before
    the user sends anything, show the usage the database holds (and the budget left), not 0."""
    own = OwnRedis(tmp_path / "redis").start()
    try:
        with fresh_database("postgresql", tmp_path) as url:
            rig = start_rig(
                url,
                groups=[{"name": "g", "token_budget": BUDGET}],
                users=[{"name": "u", "group": "g"}, {"name": "ops", "group": "g"}],
                redis_url=own.url,
            )
            try:
                key, admin = run_in_thread(_keys(url))
                body = chat_body("openai", stream=False, max_tokens=20)
                for _ in range(3):
                    answer = http.post(
                        rig.url + "/v1/chat/completions", json=body, headers=bearer(key)
                    )
                    assert answer.status_code == 200, answer.text
                before = _usage(rig.url, key)
                assert 0 < before["period_tokens"] < BUDGET
                reloads = rig.app.state.runtime.usage.reloads

                own.restart_empty()
                own_view = _usage_after_loss(rig.url, key, "/v1/usage")

                client = redis.Redis.from_url(own.url)
                client.flushall()  # this test's own server: the "flushed" case
                client.close()
                admin_view = _usage_after_loss(rig.url, admin, "/admin/usage/u")

                for view in (own_view, admin_view):
                    assert view["period_tokens"] == before["period_tokens"], view
                    assert view["lifetime_tokens"] == before["lifetime_tokens"], view
                    assert view["remaining_tokens"] == before["remaining_tokens"], view
                assert rig.app.state.runtime.usage.reloads == reloads + 2
            finally:
                rig.close()
    finally:
        own.stop()
