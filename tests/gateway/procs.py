"""Servers for the identity, audit and limit tests.

- `GatewayProcess` (`mindrouter serve` as a real process), `cli(...)`, `write_config` and the
  requests in each dialect (`PATHS`, `chat_body`, `bearer`) come from `bench/harness.py`, which
  the benchmarks share, and are re-exported here.
- `gateway_processes`: several gateway processes on one config, stopped however the test ends.
- `Rig`: one simulated vLLM engine (optionally wrapped in a test's ASGI middleware) and one
  gateway, both in this process on their own threads, over a database URL the test chooses.
- `EngineGate`: middleware that holds generation requests at the engine's door, so a test
  decides when admitted requests may finish instead of racing a timer.
- `text_of_chunk`: the generated text of one line of a dialect's stream.

Every gateway here serves a single model, `chat`, from one backend, so a test knows which
simulator saw each request.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from bench.harness import (
    CLI,
    DIALECTS,
    MODEL,
    PATHS,
    START_TIMEOUT,
    STOP_TIMEOUT,
    GatewayProcess,
    bearer,
    chat_body,
    child_env,
    cli,
    write_config,
)
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from mindrouter.app import build_app
from mindrouter.serving import ThreadServer
from mindrouter.settings import Settings, settings_from_dict
from mindrouter.sim import SimState, build_sim_app
from mindrouter.sim.config import SimConfig, SimModel

__all__ = [
    "CLI",
    "DIALECTS",
    "MODEL",
    "PATHS",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "EngineGate",
    "GatewayProcess",
    "Rig",
    "bearer",
    "chat_body",
    "child_env",
    "cli",
    "created_key",
    "gateway_config",
    "gateway_processes",
    "hold_stream",
    "http",
    "sim_app",
    "start_rig",
    "text_of_chunk",
    "write_config",
]

# One client for the tests' own plain HTTP calls: making a client per call costs tens of
# milliseconds (TLS set-up included), which polling loops would pay many times over.
http = httpx.Client(timeout=30)


def gateway_config(
    backend_url: str,
    database_url: str,
    *,
    groups: list[dict[str, Any]],
    users: list[dict[str, Any]],
    **top: Any,
) -> dict[str, Any]:
    """A config with one vLLM backend serving `chat`."""
    return {
        "database_url": database_url,
        "secret_key": "test-secret",
        "log_level": "WARNING",
        "backends": [{"name": "sim-1", "engine": "vllm", "url": backend_url, "models": [MODEL]}],
        "models": [{"name": MODEL, "context_length": 8192, "capabilities": ["chat"]}],
        "groups": groups,
        "users": users,
        **top,
    }


def created_key(stdout: str) -> str:
    """The key printed by `mindrouter keys create` (its last line)."""
    key = stdout.strip().splitlines()[-1].strip()
    assert key.startswith("mr2_"), stdout
    return key


@contextmanager
def gateway_processes(config: Path, logs: Path, count: int = 2) -> Iterator[list[GatewayProcess]]:
    """`count` gateway processes on one config, started together, stopped however the test ends."""
    procs = [GatewayProcess(config, logs / f"gateway-{i}.log") for i in range(count)]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.wait_ready()
        yield procs
    finally:
        for p in procs:
            p.stop()


# -- in-process ------------------------------------------------------------------------------


class EngineGate:
    """ASGI middleware in front of an engine: while closed, generation requests wait at the door,
    so requests the gateway admitted stay in flight until the test lets them through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.open = threading.Event()
        self.open.set()
        self.arrived = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            self.arrived += 1
            while not self.open.is_set():
                await asyncio.sleep(0.01)
        await self.app(scope, receive, send)


def sim_app(**overrides: Any) -> Any:
    """A simulated vLLM serving `chat`; its state is `app.state.sim`."""
    return build_sim_app(SimConfig(engine="vllm", models=[SimModel(MODEL, 8192)], **overrides))


@dataclass
class Rig:
    """A simulated engine and a gateway in this process, over `settings.database_url`."""

    sim: ThreadServer
    sim_state: SimState
    settings: Settings
    gateway: ThreadServer
    app: Starlette

    @property
    def url(self) -> str:
        return self.gateway.url

    def restart_gateway(self, meanwhile: Callable[[], None] | None = None) -> None:
        """Stops the gateway (its shutdown writes pending usage), runs `meanwhile`, and starts a
        new one over the same database: nothing carries over but what the database holds."""
        self.gateway.stop()
        if meanwhile is not None:
            meanwhile()
        self.app = build_app(self.settings)
        self.gateway = ThreadServer(self.app).start()

    def close(self) -> None:
        self.gateway.stop()
        self.sim.stop()


def start_rig(
    database_url: str,
    *,
    groups: list[dict[str, Any]],
    users: list[dict[str, Any]],
    wrap: Callable[[ASGIApp], ASGIApp] | None = None,
    **top: Any,
) -> Rig:
    """The database must already be migrated; the config's groups and users are applied when
    the gateway starts. `top` adds top-level config keys (redis_url, ...)."""
    app = sim_app()
    sim_server = ThreadServer(wrap(app) if wrap else app).start()
    try:
        settings = settings_from_dict(
            gateway_config(sim_server.url, database_url, groups=groups, users=users, **top)
        )
        gateway_app = build_app(settings)
        gateway = ThreadServer(gateway_app).start()
    except BaseException:
        sim_server.stop()
        raise
    return Rig(sim_server, app.state.sim, settings, gateway, gateway_app)


# -- requests in each dialect ------------------------------------------------------------------


def text_of_chunk(dialect: str, line: str) -> str | None:
    """The generated text one line of a dialect's stream carries, if any."""
    if dialect == "ollama":
        event = json.loads(line) if line.strip() else {}
        return (event.get("message") or {}).get("content") or None
    if not line.startswith("data: ") or line == "data: [DONE]":
        return None
    event = json.loads(line[6:])
    if dialect == "openai":
        choices = event.get("choices") or [{}]
        return (choices[0].get("delta") or {}).get("content") or None
    if event.get("type") == "content_block_delta" and event["delta"].get("type") == "text_delta":
        return event["delta"]["text"] or None
    return None


def hold_stream(url: str, key: str, received: list[int] | None = None) -> None:
    """A long stream read to its end, or until its gateway is killed (expected here); appends
    to `received` how many pieces of text reached it."""
    body = chat_body("openai", stream=True, max_tokens=5000)
    pieces = 0
    try:
        with httpx.stream(
            "POST", url + "/v1/chat/completions", json=body, headers=bearer(key), timeout=120
        ) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    pieces += bool(choices[0].get("delta", {}).get("content"))
    except httpx.HTTPError:
        pass
    if received is not None:
        received.append(pieces)
