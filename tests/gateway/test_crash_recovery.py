"""A gateway replica killed mid-stream (SIGKILL) gives back its users' slots.

Two `mindrouter serve` processes share PostgreSQL and Redis, with short leases (`lease_s: 4`,
renewed every second). A user with `max_concurrent: 2` holds both slots with streams through
replica A, which is then killed. Replica B refuses the user while A's leases have not yet
expired (checked against the expiry Redis holds), and admits the user again once they have,
without anyone settling them.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import redis

from mindrouter.serving import ThreadServer
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

LEASE_S = 4.0


async def _key(url: str) -> str:
    async with stores_at(url) as stores:
        return (await stores.keys.create_key("u")).key


def test_a_killed_replica_frees_its_users_slots_within_the_lease(tmp_path: Path) -> None:
    engine = sim_app(slots=8, tokens_per_second=10, default_tokens=100_000)
    sim = ThreadServer(engine).start()
    try:
        with (
            fresh_database("postgresql", tmp_path, migrated=False) as url,
            redis_namespace() as ns,
        ):
            config = write_config(
                tmp_path / "mindrouter.yaml",
                gateway_config(
                    sim.url,
                    url,
                    groups=[{"name": "g", "max_concurrent": 2}],
                    users=[{"name": "u", "group": "g"}],
                    redis_url=ns.url,
                    redis_prefix=ns.prefix,
                    lease_s=LEASE_S,
                    lease_renew_s=1.0,
                ),
            )
            cli("migrate", "--config", str(config))
            a = GatewayProcess(config, tmp_path / "a.log").start()
            b = GatewayProcess(config, tmp_path / "b.log").start()
            try:
                a.wait_ready()
                b.wait_ready()
                key = run_in_thread(_key(url))
                for _ in range(2):
                    threading.Thread(target=hold_stream, args=(a.url, key), daemon=True).start()
                state = engine.state.sim
                for _ in range(600):  # bounded wait for both streams to be generating
                    if len([r for r in state.records if r.first_token_at]) >= 2:
                        break
                    time.sleep(0.1)
                time.sleep(2 * 1.0)  # a renewal or two happened: leases outlive admission
                assert a._proc is not None
                a._proc.send_signal(signal.SIGKILL)
                a._proc.wait(10)

                client = redis.Redis.from_url(ns.url)
                leases = f"{ns.prefix}limits:leases:user:"
                [lease_key] = [k for k in client.scan_iter(match=leases + "*")]
                quick = chat_body("openai", stream=False, max_tokens=1)
                refused = http.post(b.url + "/v1/chat/completions", json=quick, headers=bearer(key))
                checked_at = time.time()
                held = client.zrange(lease_key, 0, -1, withscores=True)
                expiries = [float(score) for _, score in held]  # type: ignore[union-attr]
                # Refused for concurrency while the dead replica's leases were still valid.
                assert refused.status_code == 429, refused.text
                assert "concurrent" in refused.text
                assert len(expiries) == 2 and min(expiries) > checked_at - 1.0

                admitted = None
                for _ in range(300):  # bounded: the leases lapse without being settled
                    answer = http.post(
                        b.url + "/v1/chat/completions", json=quick, headers=bearer(key)
                    )
                    if answer.status_code == 200:
                        admitted = time.time()
                        break
                    time.sleep(0.1)
                assert admitted is not None, "the slots never came back"
                assert admitted >= min(expiries)  # not before the leases had expired
                client.close()
            finally:
                a.stop()
                b.stop()
    finally:
        sim.stop()
