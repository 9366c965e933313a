"""Two gateways sharing Redis in front of one engine with a single slot, as two replicas.

The engine sits behind a door (`EngineGate`): while it is closed, requests that reached the
engine wait there, holding their slot, so every step below happens in a known state however slow
the machine is.

- the slot is shared: with one request in flight through the first gateway, a request to the
  second waits (it does not reach the engine) and runs once the first is done;
- a free slot goes to the most deserving waiter of the deployment: a heavy user has two more
  requests waiting at the first gateway when a light user's request arrives at the second; the
  slot that frees at the first gateway goes to the light user's request;
- the admin views show the other gateway's load and best waiter.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from mindrouter.app import build_app
from mindrouter.serving import ThreadServer
from mindrouter.settings import settings_from_dict
from mindrouter.sim import build_sim_app
from mindrouter.sim.config import SimConfig, SimModel
from tests.gateway.databases import redis_namespace
from tests.gateway.procs import MODEL, EngineGate
from tests.gateway.stack import prepare_database, sqlite_url
from tests.gateway.test_resilience import wait_for

HTTP = httpx.Client(timeout=30)


@dataclass
class Pair:
    door: EngineGate
    urls: list[str]
    keys: dict[str, str]  # user -> key (heavy is an admin)
    servers: list[ThreadServer]

    def backend(self, gateway: int) -> dict[str, Any]:
        r = HTTP.get(self.urls[gateway] + "/admin/routing/backends", headers=self._admin)
        assert r.status_code == 200, r.text
        entry: dict[str, Any] = r.json()["data"][0]
        return entry

    def elsewhere(self, gateway: int) -> dict[str, Any]:
        r = HTTP.get(self.urls[gateway] + "/admin/queue", headers=self._admin)
        assert r.status_code == 200, r.text
        seen: dict[str, Any] = r.json()["elsewhere"]["best_waiting"]
        return seen

    @property
    def _admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys['heavy']}"}

    def ask(self, gateway: int, user: str, done: list[str], label: str) -> threading.Thread:
        def run() -> None:
            r = HTTP.post(
                self.urls[gateway] + "/v1/chat/completions",
                headers={"Authorization": f"Bearer {self.keys[user]}"},
                json={
                    "model": MODEL,
                    "messages": [{"role": "user", "content": f"question {label}"}],
                    "max_tokens": 50,
                },
            )
            assert r.status_code == 200, r.text
            done.append(label)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t


@pytest.fixture
def pair() -> Iterator[Pair]:
    sim = build_sim_app(SimConfig(engine="vllm", models=[SimModel(MODEL, 8192)]))
    door = EngineGate(sim)
    engine = ThreadServer(door).start()
    servers = [engine]
    try:
        with redis_namespace() as redis:
            raw = {
                "database_url": sqlite_url(),
                "secret_key": "test-secret",
                "log_level": "WARNING",
                "redis_url": redis.url,
                "redis_prefix": redis.prefix,
                "groups": [{"name": "testers"}],
                "users": [
                    {"name": "heavy", "group": "testers"},
                    {"name": "light", "group": "testers"},
                ],
                "backends": [
                    {
                        "name": "gpu",
                        "engine": "vllm",
                        "url": engine.url,
                        "models": [MODEL],
                        "max_concurrent": 1,
                    }
                ],
                "models": [{"name": MODEL, "context_length": 8192}],
            }
            settings = settings_from_dict(raw)
            keys = {
                "heavy": asyncio.run(prepare_database(settings, "heavy", admin=True)),
                "light": asyncio.run(prepare_database(settings, "light")),
            }
            urls = []
            for _ in range(2):
                app = build_app(settings)
                # Generous on a slow machine: the other gateway must see the free slot in time.
                app.state.runtime.sharing.slots.defer_limit = 5.0
                servers.append(ThreadServer(app).start())
                urls.append(servers[-1].url)
            yield Pair(door, urls, keys, servers)
    finally:
        door.open.set()
        for s in reversed(servers):
            s.stop()


def test_the_backend_slot_is_shared_by_both_gateways(pair: Pair) -> None:
    done: list[str] = []
    pair.door.open.clear()
    first = pair.ask(0, "heavy", done, "first")
    wait_for(lambda: pair.door.arrived == 1, "the first request to reach the engine")
    wait_for(
        lambda: pair.backend(1)["others_in_flight"] == 1,
        "the second gateway to see the first one's request",
    )
    assert pair.backend(0)["in_flight"] == 1 and pair.backend(1)["in_flight"] == 0
    second = pair.ask(1, "light", done, "second")
    time.sleep(0.5)
    assert pair.door.arrived == 1  # max_concurrent 1 for both gateways together: it waits
    pair.door.open.set()
    for t in (first, second):
        t.join(30)
    assert done == ["first", "second"] and pair.door.arrived == 2


def test_a_freed_slot_goes_to_the_better_waiter_at_the_other_gateway(pair: Pair) -> None:
    done: list[str] = []
    pair.door.open.clear()
    threads = [pair.ask(0, "heavy", done, "heavy-1")]
    wait_for(lambda: pair.door.arrived == 1, "the heavy user's first request to run")
    threads += [pair.ask(0, "heavy", done, f"heavy-{i}") for i in (2, 3)]
    wait_for(lambda: MODEL in pair.elsewhere(1), "the second gateway to see heavy's waiters")
    threads.append(pair.ask(1, "light", done, "light"))

    def light_seen_by_first() -> bool:
        best = pair.elsewhere(0).get(MODEL)
        return best is not None and best["user"] != pair.elsewhere(1)[MODEL]["user"]

    wait_for(light_seen_by_first, "the first gateway to see the light user waiting")
    pair.door.open.set()
    for t in threads:
        t.join(30)
    # Without the shared decision the first gateway would give its slot to a heavy request.
    assert done[:2] == ["heavy-1", "light"] and sorted(done[2:]) == ["heavy-2", "heavy-3"]
