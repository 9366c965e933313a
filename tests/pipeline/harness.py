"""The gateway's ASGI app in this process, in front of fake engine adapters, on an injected clock.

`in_process(backends, **top)` builds the app as `serve` does (`build_app`, its lifespan run),
over a fresh SQLite file copied from a migrated template and the single process's memory
stores (no Redis: in-process limits, slots and breakers), then swaps each backend's engine
adapter for a `FakeEngine`. Nothing listens on a socket: the health checks ask the fake engines
(healthy unless a test sets `healthy = False`, every model loaded).

Every backend serves the one model `m`. `settled()` waits for the requests' clean-ups and the
audit writer, so what a test reads afterwards is final: no polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import DIALECTS, PATHS
from starlette.applications import Starlette

from mindrouter.app import build_app
from mindrouter.backends.monitor import BackendMonitor
from mindrouter.backends.probe import Probe
from mindrouter.pipeline.flight import wait_for_closing
from mindrouter.routing.backend_config import BackendConfig
from mindrouter.scheduling import CapacityGate
from mindrouter.settings import Settings, settings_from_dict
from mindrouter.stores.sql import SqlStores, apply_config, open_stores
from tests.identity.fakes import FAST_HASHER
from tests.pipeline.asgi import Exchange, begin
from tests.pipeline.fakes import Clock, FakeEngine

MODEL = "m"
USER = [{"role": "user", "content": "hello there"}]


def request_body(dialect: str, stream: bool, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "messages": USER, "stream": stream}
    if dialect == "ollama":
        body["options"] = {"num_predict": 8}
    else:
        body["max_tokens"] = 8
    return {**body, **extra}


def backend(name: str, **fields: Any) -> dict[str, Any]:
    """A backend entry of the config; its engine is a `FakeEngine` of the same name."""
    return {
        "name": name,
        "engine": "vllm",
        "models": [{"name": MODEL, "upstream": MODEL}],
        **fields,
    }


@dataclass
class InProcess:
    app: Starlette
    settings: Settings
    stores: SqlStores
    clock: Clock
    engines: dict[str, FakeEngine]
    key: str  # an admin key: it may call the inference routes as well as /admin
    statuses: list[int] = field(default_factory=list)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    @property
    def gate(self) -> CapacityGate:
        gate: CapacityGate = self.app.state.gateway.s.gate
        return gate

    def seen(self, name: str) -> int:
        return self.engines[name].seen

    def begin(self, dialect: str, stream: bool = False, **extra: Any) -> Exchange:
        """A request on its way; `start()` waits for its status."""
        return begin(
            self.app,
            "POST",
            PATHS[dialect],
            json_body=request_body(dialect, stream, **extra),
            headers=self.auth,
        )

    async def send(self, dialect: str, stream: bool = False, **extra: Any) -> Exchange:
        """A request, once its status is known; its body is read from the exchange."""
        return await self.begin(dialect, stream, **extra).start()

    async def post(self, dialect: str, stream: bool = False, **extra: Any) -> tuple[int, bytes]:
        """A request read whole: its status and body."""
        r = await self.send(dialect, stream, **extra)
        return r.status, await r.read()

    async def get(self, path: str) -> Any:
        r = await begin(self.app, "GET", path, headers=self.auth).start()
        assert r.status == 200, await r.read()
        return await r.json()

    async def settled(self) -> None:
        """Every request's clean-up has run and the audit writer has written what it holds."""
        await wait_for_closing()
        await self.stores.audit.flush()

    async def audit(self, count: int) -> list[dict[str, Any]]:
        """The newest `count` audit records, oldest first (all of them complete)."""
        await self.settled()
        rows: list[dict[str, Any]] = await self.get(f"/admin/audit?limit={count}")
        assert len(rows) == count and all(r["status"] != "pending" for r in rows), rows
        return rows[::-1]

    async def backends(self) -> dict[str, dict[str, Any]]:
        data = (await self.get("/admin/routing/backends"))["data"]
        return {b["name"]: b for b in data}

    async def breaker(self, name: str) -> dict[str, Any]:
        state: dict[str, Any] = (await self.backends())[name]["breaker"]
        return state

    async def period_tokens(self) -> int:
        await self.settled()
        tokens: int = (await self.get("/v1/usage"))["period_tokens"]
        return tokens


async def _admin_key(stores: SqlStores, settings: Settings) -> str:
    await apply_config(stores, settings)
    created = await stores.keys.create_key("tester", admin=True)
    key: str = created.key
    return key


def _health_checks(engines: dict[str, FakeEngine]) -> Callable[[BackendConfig], Awaitable[Probe]]:
    """The health check of a fake engine: healthy unless the test says not, every model it
    serves loaded (as vLLM keeps them)."""

    async def probe(config: BackendConfig) -> Probe:
        engine = engines[config.name]
        return Probe(True) if engine.healthy else Probe(False, f"{engine.name}: unhealthy")

    return probe


@contextlib.asynccontextmanager
async def in_process(
    template: Path,
    directory: Path,
    backends: list[dict[str, Any]],
    models: list[dict[str, Any]] | None = None,
    **top: Any,
) -> AsyncIterator[InProcess]:
    database = directory / "mindrouter.db"
    shutil.copyfile(template, database)
    engines = {b["name"]: FakeEngine(b["name"]) for b in backends}
    raw = {
        "database_url": f"sqlite+aiosqlite:///{database}",
        "secret_key": "test-secret",
        "log_level": "WARNING",
        "groups": [{"name": "testers"}],
        "users": [{"name": "tester", "group": "testers"}],
        "backends": [{"url": engines[b["name"]].url, **b} for b in backends],
        "models": models or [{"name": MODEL, "context_length": 8192}],
        # The console's sign-in hashes a password when it is built: not wanted here.
        "console": {"enabled": False},
        **top,
    }
    settings = settings_from_dict(raw)
    # Keys hashed with cheap parameters: verifying one then costs nothing either.
    stores = open_stores(
        settings.database_url, hasher=FAST_HASHER, audit_commit=settings.audit_commit
    )
    key = await _admin_key(stores, settings)
    clock = Clock()
    app = build_app(settings, stores, clock=clock)
    adapters = app.state.gateway.adapters
    for name, engine in engines.items():
        await adapters[name].aclose()
        adapters[name] = engine
    monitor: BackendMonitor = app.state.runtime.monitor
    monitor._probe = _health_checks(engines)  # type: ignore[method-assign,assignment]
    async with app.router.lifespan_context(app):
        yield InProcess(app, settings, stores, clock, engines, key)


def error_message(dialect: str, body: bytes) -> str:
    """The error message of a failed response, after checking the dialect's body shape."""
    parsed = json.loads(body)
    if dialect == "openai":
        assert set(parsed["error"]) >= {"message", "type", "param", "code"}, parsed
        message: str = parsed["error"]["message"]
    elif dialect == "anthropic":
        assert parsed["type"] == "error" and parsed["request_id"], parsed
        message = parsed["error"]["message"]
    else:
        assert list(parsed) == ["error"] and isinstance(parsed["error"], str), parsed
        message = parsed["error"]
    assert message
    return message


def variant(i: int) -> tuple[str, bool]:
    """The i-th of the six ways to ask: each dialect, unary and streamed."""
    return DIALECTS[i % 3], i % 2 == 1


async def until(condition: Callable[[], bool], what: str, turns: int = 100_000) -> None:
    """Lets the event loop run until `condition` holds; fails naming `what` if it never does."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never happened: {what}")
