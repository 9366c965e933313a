"""A gateway in front of one simulated engine of each kind, for tests that go through HTTP.

Model names say which backend serves them: `chat-vllm`, `think-ollama`, `embed-llamacpp`, ...
The `openai` engine (a generic OpenAI-compatible server) is the vLLM simulator driven by the
generic adapter, so it sees only standard OpenAI fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI

from mindrouter.app import build_app
from mindrouter.serving import ThreadServer
from mindrouter.settings import Settings, settings_from_dict
from mindrouter.sim import SimState, build_sim_app
from mindrouter.sim.config import SimConfig, SimModel

ENGINES = ("vllm", "ollama", "llamacpp", "openai")
SIM_ENGINES = ("vllm", "ollama", "llamacpp")
KINDS: dict[str, tuple[str, list[str]]] = {
    # gateway model prefix -> (sim kind, gateway capabilities)
    "chat": ("chat", ["chat", "tools"]),
    "think": ("chat", ["chat", "tools", "thinking"]),
    "vision": ("vision", ["chat", "vision"]),
    "embed": ("embedding", ["embedding"]),
}


def sim_model_name(prefix: str, engine: str) -> str:
    sim_engine = "vllm" if engine == "openai" else engine
    return f"{prefix}-{sim_engine}"


@dataclass
class Stack:
    gateway: ThreadServer
    sims: dict[str, ThreadServer]
    sim_states: dict[str, SimState]
    settings: Settings
    app: FastAPI
    extra: list[ThreadServer] = field(default_factory=list)

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
    return {"backends": backends, "models": models, "secret_key": "test-secret", **top}


def start_stack(**sim_overrides: Any) -> Stack:
    apps = {e: build_sim_app(sim_config(e, **sim_overrides)) for e in SIM_ENGINES}
    sims = {e: ThreadServer(app).start() for e, app in apps.items()}
    settings = settings_from_dict(gateway_config({e: s.url for e, s in sims.items()}))
    app = build_app(settings)
    gateway = ThreadServer(app).start()
    states = {e: a.state.sim for e, a in apps.items()}
    return Stack(gateway=gateway, sims=sims, sim_states=states, settings=settings, app=app)
