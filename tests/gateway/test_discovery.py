"""Model discovery: a backend configured without a model list serves what the engine reports,
with the context length (and, from Ollama, the capabilities) it reports, for each simulator;
a model the engine stops serving leaves the listing within the health interval; a model the
admin describes keeps the description (the override)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from mindrouter.app import build_app
from mindrouter.serving import ThreadServer
from mindrouter.settings import settings_from_dict
from mindrouter.sim import build_sim_app
from mindrouter.sim.config import SimConfig, SimModel
from mindrouter.stores.sql import open_stores
from tests.gateway.stack import prepare_database, sqlite_url

HEALTH_INTERVAL_S = 0.5
DEADLINE_S = 20.0


class Discovered:
    def __init__(self, engine: str) -> None:
        models = [SimModel("alpha-chat", 4096), SimModel("beta-chat", 6144)]
        if engine == "ollama":
            models.append(SimModel("gamma-embed", 2048, kind="embedding"))
        self.sim = ThreadServer(build_sim_app(SimConfig(engine=engine, models=models))).start()  # type: ignore[arg-type]
        url = self.url = sqlite_url()
        config: dict[str, Any] = {
            "database_url": url,
            "secret_key": "test-secret",
            "health_interval_s": HEALTH_INTERVAL_S,
            "groups": [{"name": "testers"}],
            "users": [{"name": "tester", "group": "testers"}],
            "backends": [{"name": f"{engine}-1", "engine": engine, "url": self.sim.url}],
            # Described by the admin: its description wins over what the engine says.
            "models": [{"name": "beta-chat", "context_length": 1000, "capabilities": ["chat"]}],
        }
        settings = settings_from_dict(config)
        self.key = asyncio.run(prepare_database(settings))
        self.gateway = ThreadServer(build_app(settings)).start()

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def listed(self) -> list[str]:
        r = httpx.get(self.gateway.url + "/v1/models", headers=self.auth, timeout=10)
        return sorted(m["id"] for m in r.json()["data"])

    def shown(self, name: str) -> dict[str, Any]:
        r = httpx.post(
            self.gateway.url + "/api/show", json={"model": name}, headers=self.auth, timeout=10
        )
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def close(self) -> None:
        self.gateway.stop()
        self.sim.stop()


@pytest.fixture(params=["vllm", "ollama", "llamacpp"])
def discovered(request: pytest.FixtureRequest) -> Iterator[tuple[str, Discovered]]:
    d = Discovered(request.param)
    yield request.param, d
    d.close()


def context_of(shown: dict[str, Any]) -> int:
    info = shown["model_info"]
    return int(info[f"{info['general.architecture']}.context_length"])


def test_models_are_discovered_and_disappear(discovered: tuple[str, Discovered]) -> None:
    engine, d = discovered
    expected = ["alpha-chat", "beta-chat"] + (["gamma-embed"] if engine == "ollama" else [])
    assert d.listed() == expected
    if engine != "llamacpp":  # llama.cpp reports one context (its slots') for every model
        assert context_of(d.shown("alpha-chat")) == 4096
    assert context_of(d.shown("beta-chat")) == 1000, "the described model keeps its context"
    if engine == "ollama":
        assert "embedding" in d.shown("gamma-embed")["capabilities"]
        r = httpx.post(
            d.gateway.url + "/api/embed",
            json={"model": "gamma-embed", "input": "x"},
            headers=d.auth,
            timeout=10,
        )
        assert r.status_code == 200, r.text
    r = httpx.post(
        d.gateway.url + "/v1/chat/completions",
        json={"model": "alpha-chat", "messages": [{"role": "user", "content": "hi"}]},
        headers=d.auth,
        timeout=30,
    )
    assert r.status_code == 200, r.text

    assert httpx.post(d.sim.url + "/sim/control", json={"remove_model": "alpha-chat"}).is_success
    start = time.monotonic()
    while "alpha-chat" in d.listed():
        assert time.monotonic() - start < DEADLINE_S, "the removed model is still listed"
        time.sleep(0.05)
    print(f"{engine}: removed model gone after {time.monotonic() - start:.2f} s")
    assert "beta-chat" in d.listed()


async def _disable(url: str, model: str, enabled: bool) -> None:
    stores = open_stores(url)
    try:
        await stores.catalog.update_model(model, {"enabled": enabled})
    finally:
        await stores.aclose()


def test_a_disabled_model_is_retired_even_where_discovered() -> None:
    d = Discovered("vllm")
    try:
        asyncio.run(_disable(d.url, "beta-chat", False))
        start = time.monotonic()
        while "beta-chat" in d.listed():
            assert time.monotonic() - start < DEADLINE_S, "the disabled model is still listed"
            time.sleep(0.05)
        time.sleep(3 * HEALTH_INTERVAL_S)  # health checks that report it again change nothing
        assert d.listed() == ["alpha-chat"]
        asyncio.run(_disable(d.url, "beta-chat", True))
        while "beta-chat" not in d.listed():
            assert time.monotonic() - start < DEADLINE_S, "the enabled model is not back"
            time.sleep(0.05)
    finally:
        d.close()
