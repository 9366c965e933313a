"""The circuit breaker shared by two gateways that share Redis, as two replicas are deployed.

Both gateways front the same two simulated engines: `bad` (preferred by priority, failing every
request with 500) and `good`. The failures are sent through both gateways in turn, so neither
reaches the threshold on its own:

- the breaker opens in both after three failures in all, and the other gateway keeps its
  requests away from `bad` as well;
- after the cooldown, of eight concurrent requests spread over both gateways exactly one reaches
  `bad` (the one probe in the deployment); its failure reopens the breaker in both;
- once `bad` is fixed, the next probe closes the breaker in both and `bad` is preferred again;
- the admin view of each gateway says the breaker is shared.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from mindrouter.app import build_app
from mindrouter.serving import ThreadServer
from mindrouter.settings import settings_from_dict
from tests.gateway.databases import redis_namespace
from tests.gateway.stack import prepare_database, sqlite_url
from tests.gateway.test_resilience import (
    HTTP,
    MODEL,
    USER,
    Cluster,
    backend,
    start_cluster,
    vllm_sim,
    wait_for,
)

COOLDOWN = 1.0


class Replica:
    """A second gateway over the same engines and Redis prefix, with its own database."""

    def __init__(self, first: Cluster, raw: dict[str, Any]) -> None:
        settings = settings_from_dict({**raw, "database_url": sqlite_url()})
        self.key = asyncio.run(prepare_database(settings, admin=True))
        self.server = ThreadServer(build_app(settings)).start()
        self.url = self.server.url
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key=self.key, max_retries=0)

    def breaker(self, name: str) -> dict[str, Any]:
        r = HTTP.get(
            self.url + "/admin/routing/backends", headers={"Authorization": f"Bearer {self.key}"}
        )
        assert r.status_code == 200, r.text
        state: dict[str, Any] = {b["name"]: b for b in r.json()["data"]}[name]["breaker"]
        return state


@pytest.fixture
def pair() -> Iterator[tuple[Cluster, Replica]]:
    with redis_namespace() as redis:
        shared = {
            "redis_url": redis.url,
            "redis_prefix": redis.prefix,
            "breaker_threshold": 3,
            "breaker_cooldown_s": COOLDOWN,
        }
        first = start_cluster(
            [
                backend("bad", vllm_sim(fail_rate=1.0, fail_status=500, ttft_ms=300), priority=3),
                backend("good", vllm_sim()),
            ],
            **shared,
        )
        try:
            raw = {
                "secret_key": "test-secret",
                "log_level": "WARNING",
                "groups": [{"name": "testers"}],
                "users": [{"name": "tester", "group": "testers"}],
                "backends": [
                    {
                        "name": name,
                        "engine": "vllm",
                        "url": first.sims[name].url,
                        "priority": 3 if name == "bad" else 0,
                        "models": [{"name": MODEL, "upstream": MODEL}],
                    }
                    for name in ("bad", "good")
                ],
                "models": [{"name": MODEL, "context_length": 8192}],
                **shared,
            }
            second = Replica(first, raw)
            try:
                yield first, second
            finally:
                second.server.stop()
        finally:
            first.close()


def ask(client: openai.OpenAI) -> None:
    done = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4)
    assert done.choices[0].message.content


def both(first: Cluster, second: Replica, check: Callable[[dict[str, Any]], bool]) -> bool:
    return check(first.breaker("bad")) and check(second.breaker("bad"))


def test_the_breaker_opens_probes_once_and_closes_across_two_gateways(
    pair: tuple[Cluster, Replica],
) -> None:
    first, second = pair
    clients = [first.openai(), second.client]
    assert first.breaker("bad")["shared"] and second.breaker("bad")["shared"]

    # Three failures, alternating between the gateways (each waits until the other knows).
    for i in range(3):
        ask(clients[i % 2])
        assert first.seen("bad") == i + 1
        wait_for(
            lambda n=i + 1: both(first, second, lambda b: b["consecutive_failures"] == n),
            f"both gateways to count {i + 1} failures",
        )
    wait_for(lambda: both(first, second, lambda b: b["state"] == "open"), "open in both")
    assert first.breaker("bad")["opened_total"] == second.breaker("bad")["opened_total"] == 1
    # Open: neither gateway sends anything to `bad`.
    for i in range(6):
        ask(clients[i % 2])
    assert first.seen("bad") == 3

    # Half-open: eight concurrent requests over both gateways, one probe between them.
    wait_for(lambda: both(first, second, lambda b: b["state"] == "half_open"), "half-open")
    errors: list[BaseException] = []

    def one(client: openai.OpenAI) -> None:
        try:
            ask(client)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(clients[i % 2],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert first.seen("bad") == 4
    wait_for(
        lambda: both(first, second, lambda b: b["state"] == "open" and b["opened_total"] == 2),
        "the failed probe to reopen the breaker in both",
    )

    # Fixed: the next probe, through either gateway, closes it in both.
    first.control("bad", fail_rate=0.0)
    wait_for(lambda: both(first, second, lambda b: b["state"] == "half_open"), "half-open again")
    ask(second.client)
    assert first.seen("bad") == 5
    wait_for(
        lambda: both(
            first, second, lambda b: (b["state"], b["consecutive_failures"]) == ("closed", 0)
        ),
        "closed in both",
    )
    ask(first.openai())
    assert first.seen("bad") == 6
