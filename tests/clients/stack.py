"""The gateway in front of one simulated engine of each kind, for the real clients to talk to.

Model names say which backend serves them: `chat-vllm`, `chat-llamacpp`, `chat-openai` (the
vLLM simulator behind the generic OpenAI-compatible adapter) and `chat-ollama`; `think-<engine>`
is the same engine's model that reasons. Every model has a context of `CONTEXT` tokens: Claude
Code alone sends about 48 KB of instructions and tool schemas with `max_tokens: 32000`.

`Stack.user()` makes a fresh user with its own key, so each test reads only its own audit
records and usage; `Stack.engine_records()` lists what the engines counted since a mark.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx

from mindrouter.app import build_app
from mindrouter.observability.logging import configure_logging
from mindrouter.serving import ThreadServer
from mindrouter.settings import settings_from_dict
from mindrouter.sim import SimState, build_sim_app
from mindrouter.sim.config import SimConfig, SimModel
from mindrouter.sim.engine import RequestRecord
from mindrouter.stores.sql import apply_config, open_stores
from mindrouter.stores.sql.migrate import upgrade
from tests.gateway.stack import sqlite_url

# gateway backend -> the simulator that serves it
ENGINES: dict[str, str] = {
    "vllm": "vllm",
    "llamacpp": "llamacpp",
    "openai": "vllm",
    "ollama": "ollama",
}
CHAT_ROUTES = ("/v1/chat/completions", "/api/chat")
CONTEXT = 200_000
ADMIN = "root"
# gateway model prefix -> (simulated model prefix, capabilities)
KINDS: dict[str, tuple[str, list[str]]] = {
    "chat": ("sim", ["chat", "tools"]),
    "think": ("think", ["chat", "tools", "thinking"]),
}


def model_name(engine: str, kind: str = "chat") -> str:
    return f"{kind}-{engine}"


def _upstream(engine: str, kind: str) -> str:
    """The simulator's name for it: distinct per backend, also where two share a simulator."""
    return f"{KINDS[kind][0]}-{engine}"


def gateway_config(urls: dict[str, str], database_url: str) -> dict[str, Any]:
    backends = [
        {
            "name": f"{engine}-1",
            "engine": engine,
            "url": urls[sim],
            "models": [
                {"name": model_name(engine, kind), "upstream": _upstream(engine, kind)}
                for kind in KINDS
            ],
        }
        for engine, sim in ENGINES.items()
    ]
    models = [
        {"name": model_name(e, kind), "context_length": CONTEXT, "capabilities": caps}
        for e in ENGINES
        for kind, (_, caps) in KINDS.items()
    ]
    return {
        "database_url": database_url,
        "secret_key": "clients-secret",
        "log_level": "WARNING",
        "max_attempts": 1,
        "backends": backends,
        "models": models,
        "groups": [{"name": "testers", "scheduler_weight": 1}],
        "users": [{"name": ADMIN, "group": "testers"}],
    }


@dataclass
class Stack:
    gateway: ThreadServer
    sims: dict[str, ThreadServer]
    sim_states: dict[str, SimState]
    database_url: str
    admin_key: str
    _users: int = 0

    @property
    def url(self) -> str:
        return self.gateway.url

    def close(self) -> None:
        for server in [self.gateway, *self.sims.values()]:
            server.stop()

    def user(self) -> tuple[str, str]:
        """A new user of group `testers` and a key of theirs: (name, key)."""
        self._users += 1
        name = f"client{self._users}"
        headers = {"Authorization": f"Bearer {self.admin_key}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30) as http:
            made = http.post("/admin/users", json={"name": name, "group": "testers"})
            assert made.status_code in (200, 201), made.text
            key = http.post("/admin/keys", json={"user": name})
            assert key.status_code in (200, 201), key.text
        return name, str(key.json()["key"])

    def mark(self, engine: str) -> int:
        return len(self.sim_states[ENGINES[engine]].records)

    def engine_records(self, engine: str, since: int) -> list[RequestRecord]:
        """The chat requests backend `engine` sent its simulator after `mark(engine)`."""
        names = {_upstream(engine, kind) for kind in KINDS}
        records = self.sim_states[ENGINES[engine]].records[since:]
        return [r for r in records if r.route in CHAT_ROUTES and r.model in names]

    def audit(self, user: str, count: int) -> list[dict[str, Any]]:
        """The user's `count` audit records, oldest first, once none is pending any more.

        The outcome is written by a background task after the last byte, so it may trail the
        client's exit by a moment.
        """
        headers = {"Authorization": f"Bearer {self.admin_key}"}
        deadline = time.monotonic() + 20
        while True:
            resp = httpx.get(
                self.url + "/admin/audit",
                params={"user": user, "limit": 1000},
                headers=headers,
                timeout=30,
            )
            assert resp.status_code == 200, resp.text
            entries: list[dict[str, Any]] = list(reversed(resp.json()))
            done = [e for e in entries if e["status"] != "pending"]
            if len(done) >= count and len(done) == len(entries):
                return entries
            assert time.monotonic() < deadline, f"audit of {user}: {entries}"
            time.sleep(0.1)

    def lifetime_tokens(self, key: str) -> int:
        resp = httpx.get(
            self.url + "/v1/usage", headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        assert resp.status_code == 200, resp.text
        tokens: int = resp.json()["lifetime_tokens"]
        return tokens


def sim_config(sim: str) -> SimConfig:
    models = [
        SimModel(_upstream(engine, kind), CONTEXT)
        for engine, served_by in ENGINES.items()
        if served_by == sim
        for kind in KINDS
    ]
    return SimConfig(engine=sim, models=models)  # type: ignore[arg-type]


async def _prepare(database_url: str, config: dict[str, Any]) -> str:
    stores = open_stores(database_url)
    try:
        await upgrade(stores.engine)
        await apply_config(stores, settings_from_dict(config))
        created = await stores.keys.create_key(ADMIN, admin=True)
        key: str = created.key
        return key
    finally:
        await stores.aclose()


def start_stack() -> Stack:
    apps = {e: build_sim_app(sim_config(e)) for e in sorted(set(ENGINES.values()))}
    sims = {e: ThreadServer(app).start() for e, app in apps.items()}
    database_url = sqlite_url()
    config = gateway_config({e: s.url for e, s in sims.items()}, database_url)
    settings = settings_from_dict(config)
    configure_logging(settings.log_level)
    admin_key = asyncio.run(_prepare(database_url, config))
    gateway = ThreadServer(build_app(settings)).start()
    return Stack(
        gateway=gateway,
        sims=sims,
        sim_states={e: a.state.sim for e, a in apps.items()},
        database_url=database_url,
        admin_key=admin_key,
    )
