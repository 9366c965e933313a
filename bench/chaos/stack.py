"""What the soak runs on: its own PostgreSQL database (on the shared server) and its own Redis
(a redis-server on a free port), simulated engines of each type in this process, and three
`mindrouter serve` processes behind the round-robin proxy."""

from __future__ import annotations

import asyncio
import secrets
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from bench.chaos.proxy import RoundRobinProxy
from bench.harness import (
    MODEL,
    POSTGRES,
    GatewayProcess,
    OwnRedis,
    cli,
    postgres_admin,
    write_config,
)
from mindrouter.serving import ThreadServer
from mindrouter.sim import SimState, build_sim_app
from mindrouter.sim.config import SimConfig, SimModel

TOKENS_PER_SECOND = 60.0
USERS = {
    # name: (rpm, max_concurrent, token_budget); every user runs at some limit.
    "ana": (40, 3, 0),
    "ben": (40, 2, 0),
    "cho": (60, 4, 0),
    "dee": (40, 3, 12_000),  # runs out of budget during the soak
}
LEASE_S = 20.0
GRACE_S = 10.0
START_ATTEMPTS = 5


async def _postgres(sql: str, *args: Any) -> list[Any]:
    """Runs `sql` on the server's `postgres` database (CREATE and DROP DATABASE run outside
    any database they name)."""
    conn = await postgres_admin(timeout=10)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


def _create_database() -> str:
    name = f"mrchaos_{secrets.token_hex(6)}"
    asyncio.run(_postgres(f'CREATE DATABASE "{name}"'))
    url = POSTGRES.set(drivername="postgresql+asyncpg", database=name)
    return url.render_as_string(hide_password=False)


def _sims() -> dict[str, SimConfig]:
    def cfg(engine: Any, name: str, **extra: Any) -> SimConfig:
        return SimConfig(
            engine=engine,
            models=[SimModel(name, 8192)],
            slots=16,
            tokens_per_second=TOKENS_PER_SECOND,
            **extra,
        )

    return {
        "vllm-a": cfg("vllm", MODEL),  # fails half its requests during a window
        "vllm-b": cfg("vllm", MODEL),
        "ollama": cfg("ollama", f"{MODEL}:latest"),
        "llamacpp": cfg("llamacpp", MODEL),  # hangs during a window
    }


@dataclass
class Replica:
    name: str
    config: Path
    logs: Path
    proc: GatewayProcess | None = None
    starts: int = 0
    failed_starts: int = 0
    # Out of the proxy's rotation: what an orchestrator does before it stops a replica.
    in_rotation: bool = True

    def start(self) -> None:
        """Started as a supervisor would: a start that fails (a gateway exits when its database
        fails it while it starts, as the soak's faults can make it do) is tried again."""
        for attempt in range(1, START_ATTEMPTS + 1):
            self.starts += 1
            self.in_rotation = True
            self.proc = GatewayProcess(self.config, self.logs / f"{self.name}-{self.starts}.log")
            try:
                self.proc.start().wait_ready()
                return
            except AssertionError as exc:
                self.failed_starts += 1
                print(f"{self.name}: start {attempt} failed: {str(exc)[:300]}", file=sys.stderr)
                if attempt == START_ATTEMPTS:
                    raise
                time.sleep(2.0)

    @property
    def address(self) -> tuple[str, int] | None:
        if self.proc is None or not self.proc.url or not self.in_rotation:
            return None
        host, port = self.proc.url.removeprefix("http://").rsplit(":", 1)
        return host, int(port)

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None and self.proc._proc is not None
        self.proc._proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None and self.proc._proc is not None
        code = self.proc._proc.wait(timeout)
        self.proc = None
        return code


@dataclass
class Stack:
    workdir: Path
    database_url: str = ""
    redis: OwnRedis | None = None
    sims: dict[str, ThreadServer] = field(default_factory=dict)
    states: dict[str, SimState] = field(default_factory=dict)
    replicas: list[Replica] = field(default_factory=list)
    proxy: RoundRobinProxy | None = None
    prefix: str = "mrchaos:"

    def up(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.database_url = _create_database()
        self.redis = OwnRedis(self.workdir / "redis").start()
        backends = []
        for name, config in _sims().items():
            app = build_sim_app(config)
            self.sims[name] = ThreadServer(app).start()
            self.states[name] = app.state.sim
            upstream = config.models[0].name
            backends.append(
                {
                    "name": name,
                    "engine": config.engine,
                    "url": self.sims[name].url,
                    "max_concurrent": 6,
                    "models": [{"name": MODEL, "upstream": upstream}],
                }
            )
        settings: dict[str, Any] = {
            "database_url": self.database_url,
            "redis_url": self.redis.url,
            "redis_prefix": self.prefix,
            "secret_key": "chaos-soak-secret-key-0123456789",
            "log_level": "WARNING",
            "backends": backends,
            "models": [{"name": MODEL, "context_length": 8192}],
            "groups": [
                {"name": f"g-{u}", "rpm": rpm, "max_concurrent": conc, "token_budget": budget}
                for u, (rpm, conc, budget) in USERS.items()
            ],
            "users": [{"name": u, "group": f"g-{u}"} for u in USERS],
            "capacity_wait_s": 10,
            "timeouts": {"connect": 2, "first_byte": 3, "idle": 10, "total": 30},
            "shutdown_grace_s": GRACE_S,
            "breaker_cooldown_s": 5,
            "health_interval_s": 2,
        }
        path = write_config(self.workdir / "mindrouter.yaml", settings)
        cli("migrate", "--config", str(path))
        self.replicas = [Replica(f"r{i}", path, self.workdir) for i in range(3)]
        for replica in self.replicas:
            replica.start()
        self.proxy = RoundRobinProxy(
            lambda: [a for r in self.replicas if (a := r.address) is not None]
        ).start()

    @property
    def url(self) -> str:
        assert self.proxy is not None
        return f"http://127.0.0.1:{self.proxy.port}"

    def down(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        for replica in self.replicas:
            if replica.proc is not None:
                replica.proc.stop()
        for sim in self.sims.values():
            sim.stop()
        if self.redis is not None:
            self.redis.stop()
        if self.database_url:
            name = make_url(self.database_url).database
            asyncio.run(_postgres(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    def terminate_database_connections(self) -> int:
        """pg_terminate_backend on every connection to the soak's database (none other)."""

        rows = asyncio.run(
            _postgres(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = $1 AND pid <> pg_backend_pid()",
                make_url(self.database_url).database,
            )
        )
        return sum(1 for r in rows if r[0])
