"""A gateway in front of one simulated engine of each kind, for tests that go through HTTP.

Model names say which backend serves them: `chat-vllm`, `think-ollama`, `embed-llamacpp`, ...
The `openai` engine (a generic OpenAI-compatible server) is the vLLM simulator driven by the
generic adapter, so it sees only standard OpenAI fields.

Every request needs an API key: `stack.key` (user `tester`), or the headers `stack.auth`. The
database is a fresh SQLite file per stack, migrated before the gateway starts.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette

from mindrouter.app import build_app
from mindrouter.serving import ThreadServer
from mindrouter.settings import Settings, settings_from_dict
from mindrouter.sim import SimState, build_sim_app
from mindrouter.sim.config import SimConfig, SimModel
from mindrouter.stores.sql import apply_config, open_stores
from mindrouter.stores.sql.migrate import upgrade

ENGINES = ("vllm", "ollama", "llamacpp", "openai")
SIM_ENGINES = ("vllm", "ollama", "llamacpp")
KINDS: dict[str, tuple[str, list[str]]] = {
    # gateway model prefix -> (sim kind, gateway capabilities)
    "chat": ("chat", ["chat", "tools"]),
    "think": ("chat", ["chat", "tools", "thinking"]),
    "vision": ("vision", ["chat", "vision"]),
    "embed": ("embedding", ["embedding"]),
}


METRICS_TOKEN = "test-metrics-token"


def sim_model_name(prefix: str, engine: str) -> str:
    sim_engine = "vllm" if engine == "openai" else engine
    return f"{prefix}-{sim_engine}"


@dataclass
class Stack:
    gateway: ThreadServer
    sims: dict[str, ThreadServer]
    sim_states: dict[str, SimState]
    settings: Settings
    app: Starlette
    key: str = ""
    database_url: str = ""
    extra: list[ThreadServer] = field(default_factory=list)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    @property
    def url(self) -> str:
        return self.gateway.url

    def sim_state(self, engine: str) -> SimState:
        return self.sim_states["vllm" if engine == "openai" else engine]

    def close(self) -> None:
        for s in [self.gateway, *self.sims.values(), *self.extra]:
            s.stop()


def sim_config(engine: str, **overrides: Any) -> SimConfig:
    models = [
        SimModel(sim_model_name(prefix, engine), 8192, kind=kind)  # type: ignore[arg-type]
        for prefix, (kind, _) in KINDS.items()
    ]
    return SimConfig(engine=engine, models=models, **overrides)  # type: ignore[arg-type]


def gateway_config(urls: dict[str, str], **top: Any) -> dict[str, Any]:
    backends = []
    models = []
    for engine in ENGINES:
        sim_engine = "vllm" if engine == "openai" else engine
        served = []
        for prefix, (_, caps) in KINDS.items():
            name = f"{prefix}-{engine}"
            served.append({"name": name, "upstream": sim_model_name(prefix, engine)})
            models.append({"name": name, "context_length": 8192, "capabilities": caps})
        backends.append(
            {"name": f"{engine}-1", "engine": engine, "url": urls[sim_engine], "models": served}
        )
    return {
        "backends": backends,
        "models": models,
        "secret_key": "test-secret",
        "metrics_token": METRICS_TOKEN,
        "groups": [{"name": "testers", "scheduler_weight": 1}],
        "users": [{"name": "tester", "group": "testers"}],
        **top,
    }


async def prepare_database(settings: Settings, user: str = "tester", admin: bool = False) -> str:
    """Migrates the database, applies the config and returns a new key for `user`."""
    stores = open_stores(settings.database_url)
    try:
        await upgrade(stores.engine)
        await apply_config(stores, settings)
        created = await stores.keys.create_key(user, admin=admin)
        key: str = created.key
        return key
    finally:
        await stores.aclose()


def sqlite_url() -> str:
    return f"sqlite+aiosqlite:///{tempfile.mkdtemp(prefix='mr-test-')}/mindrouter.db"


def start_stack(**sim_overrides: Any) -> Stack:
    apps = {e: build_sim_app(sim_config(e, **sim_overrides)) for e in SIM_ENGINES}
    sims = {e: ThreadServer(app).start() for e, app in apps.items()}
    url = sqlite_url()
    settings = settings_from_dict(
        gateway_config({e: s.url for e, s in sims.items()}, database_url=url)
    )
    key = asyncio.run(prepare_database(settings))
    app = build_app(settings)
    gateway = ThreadServer(app).start()
    states = {e: a.state.sim for e, a in apps.items()}
    return Stack(
        gateway=gateway,
        sims=sims,
        sim_states=states,
        settings=settings,
        app=app,
        key=key,
        database_url=url,
    )
