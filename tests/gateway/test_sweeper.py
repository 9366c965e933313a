"""A gateway process killed mid-stream (SIGKILL): its `pending` audit records are closed as
`interrupted` by another process's sweeper, with the tokens of their last checkpoint, or by the
same gateway started again on the same machine, with the counts its journal held at the kill;
charged once, to the database and to the limit counters, and the user's slots come back.

Short heartbeats (`heartbeat_s: 0.5`, `instance_stale_s: 3`) and leases (`lease_s: 4`) keep the
test brief; the mechanism is the one the defaults drive (3 s and 15 s, 20 s leases).
"""

from __future__ import annotations

import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import select

from mindrouter.serving import ThreadServer
from mindrouter.stores.sql.schema import audit_records, instances
from tests.gateway.databases import fresh_database, redis_namespace, stores_at
from tests.gateway.procs import (
    GatewayProcess,
    bearer,
    chat_body,
    cli,
    gateway_config,
    hold_stream,
    http,
    sim_app,
    write_config,
)
from tests.stores.conftest import run_in_thread

HEARTBEAT_S = 0.5
STALE_S = 3.0
STREAMS = 2


async def _key(url: str) -> tuple[str, int]:
    async with stores_at(url) as stores:
        created = await stores.keys.create_key("u")
        user = await stores.directory.get_user("u")
        return created.key, user.id


async def _rows(url: str) -> tuple[list[Any], list[Any]]:
    async with stores_at(url) as stores, stores.engine.connect() as conn:
        records = (await conn.execute(select(audit_records))).all()
        alive = (await conn.execute(select(instances))).all()
    return records, alive


async def _lifetime(url: str, user_id: int) -> int:
    async with stores_at(url) as stores:
        return (await stores.usage.get_usage(user_id)).lifetime_tokens


def _wait(condition: Any, what: str, tries: int = 600) -> Any:
    for _ in range(tries):  # bounded: a broken mechanism fails instead of hanging
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


@pytest.mark.parametrize("engine", ["postgresql", "sqlite"])
def test_a_killed_gateways_records_are_closed_and_charged_once(engine: str, tmp_path: Path) -> None:
    engine_app = sim_app(slots=8, tokens_per_second=20, default_tokens=100_000)
    sim = ThreadServer(engine_app).start()
    state = engine_app.state.sim
    try:
        with fresh_database(engine, tmp_path, migrated=False) as url, redis_namespace() as ns:

            def config(name: str) -> Path:
                return write_config(
                    tmp_path / f"{name}.yaml",
                    gateway_config(
                        sim.url,
                        url,
                        groups=[{"name": "g", "max_concurrent": STREAMS}],
                        users=[{"name": "u", "group": "g"}],
                        redis_url=ns.url,
                        redis_prefix=ns.prefix,
                        lease_s=4.0,
                        lease_renew_s=1.0,
                        heartbeat_s=HEARTBEAT_S,
                        instance_stale_s=STALE_S,
                        journal_dir=str(tmp_path / f"journal-{name}"),
                    ),
                )

            # PostgreSQL: a surviving replica on another machine (its own journal folder)
            # sweeps. SQLite: the same gateway, started again, takes in the dead one's journal.
            a_config = config("a")
            cli("migrate", "--config", str(a_config))
            a = GatewayProcess(a_config, tmp_path / "a.log").start()
            survivor = GatewayProcess(
                config("b") if engine == "postgresql" else a_config, tmp_path / "b.log"
            )
            if engine == "postgresql":
                survivor.start()
            try:
                a.wait_ready()
                if engine == "postgresql":
                    survivor.wait_ready()
                key, user_id = run_in_thread(_key(url))
                received: list[int] = []
                for _ in range(STREAMS):
                    threading.Thread(
                        target=hold_stream, args=(a.url, key, received), daemon=True
                    ).start()

                def checkpointed() -> bool:
                    records, _ = run_in_thread(_rows(url))
                    return len(records) == STREAMS and all(
                        (r.output_tokens or 0) > 0 for r in records
                    )

                _wait(checkpointed, "both streams checkpointed")
                _, alive = run_in_thread(_rows(url))
                killed = next(i for i in alive if i.pid == a.pid)
                heartbeat_before_kill = killed.heartbeat_at
                assert a._proc is not None
                a._proc.send_signal(signal.SIGKILL)
                a._proc.wait(10)
                killed_at = datetime.now(UTC)
                generated = sum(r.completion_tokens for r in state.records)
                if engine == "sqlite":
                    survivor.start().wait_ready()

                def closed() -> list[Any]:
                    records, _ = run_in_thread(_rows(url))
                    return [r for r in records if r.status != "pending"] == records and records

                records = _wait(closed, "the dead gateway's records closed")
                assert {r.status for r in records} == {"interrupted"}
                assert all(r.instance_id == killed.id for r in records)
                for r in records:
                    # Not before the heartbeat had lapsed; after the kill.
                    assert r.completed_at >= heartbeat_before_kill.replace(tzinfo=UTC)
                    assert r.completed_at >= killed_at.replace(microsecond=0)
                    assert "stopped before it ended" in r.error_message
                charged = sum(r.input_tokens + r.output_tokens for r in records)
                output = sum(r.output_tokens for r in records)
                assert 0 < output <= generated  # the last checkpoint, never more than was made
                if engine == "sqlite":
                    # The journal's counts: at least every piece of text that reached the
                    # clients (what the engine had sent beyond it can be in a socket at the
                    # kill, read by nobody).
                    _wait(lambda: len(received) == STREAMS, "both clients saw the kill")
                    assert output >= sum(received) > 0
                    assert not (tmp_path / "journal-a" / f"{killed.id}.journal").exists()
                _wait(lambda: run_in_thread(_lifetime(url, user_id)) == charged, "charge")
                _, alive = run_in_thread(_rows(url))
                assert killed.id not in {i.id for i in alive}  # the row went with the sweep

                # The limit counters saw the swept tokens too, and the slots came back.
                client = redis.Redis.from_url(ns.url)
                usage_key = f"{ns.prefix}limits:usage:user:{user_id}"
                assert int(client.hget(usage_key, "lifetime") or 0) >= charged
                quick = chat_body("openai", stream=False, max_tokens=1)

                def admitted() -> bool:
                    answer = http.post(
                        survivor.url + "/v1/chat/completions", json=quick, headers=bearer(key)
                    )
                    return answer.status_code == 200

                _wait(admitted, "the user admitted again")
                client.close()
                # A second sweep changes nothing: charged exactly once.
                time.sleep(3 * HEARTBEAT_S)
                records_after, _ = run_in_thread(_rows(url))
                assert run_in_thread(_lifetime(url, user_id)) == charged + sum(
                    r.input_tokens + r.output_tokens for r in records_after if r.status == "ok"
                )
            finally:
                a.stop()
                survivor.stop()
    finally:
        sim.stop()
