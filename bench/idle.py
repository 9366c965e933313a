"""What a governed gateway costs with no traffic at all.

    python -m bench.idle [--seconds 60] [--warmup 15]

Starts two simulated vLLM engines (`mindrouter sim`) and `mindrouter serve` on a fresh
PostgreSQL database and a private Redis prefix (the governed profile of bench/overhead), waits
`--warmup` seconds for start-up work to settle, then reads the gateway's CPU time (user +
system, from /proc, the whole process tree) and its database's transaction count before and
after `--seconds` of silence. CPU time, not wall time: the figure does not depend on what the
neighbours on a shared machine do. Transactions are counted by PostgreSQL itself.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any
from uuid import uuid4

import yaml

from bench.overhead.targets import (
    HOST,
    REDIS_URL,
    Server,
    _mindrouter_cli,
    _pg_execute,
    _redis_delete,
    _spawn,
    _wait_ready,
    pg_transactions,
)
from bench.ports import free_port

MODEL = "idle-model"


async def _sim(workdir: Path, name: str) -> Server:
    port = free_port()
    log = workdir / f"{name}.log"
    argv = [sys.executable, "-m", "mindrouter.cli", "sim", "--engine", "vllm"]
    argv += ["--port", str(port), "--model", f"{MODEL}:8192"]
    server = Server(name, port, _spawn(argv, log, "0"), log)
    await _wait_ready(server, "/health", 60)
    return server


def _config(workdir: Path, database_url: str, prefix: str, sims: list[Server]) -> Path:
    config: dict[str, Any] = {
        "database_url": database_url,
        "redis_url": REDIS_URL,
        "redis_prefix": prefix,
        "log_level": "WARNING",
        "secret_key": "idle-" + uuid4().hex,
        "groups": [{"name": "idle", "max_concurrent": 100, "rpm": 10_000}],
        "users": [{"name": "idle", "group": "idle"}],
        "backends": [
            {"name": s.name, "engine": "vllm", "url": f"http://{HOST}:{s.port}", "models": [MODEL]}
            for s in sims
        ],
        "models": [{"name": MODEL, "context_length": 8192, "capabilities": ["chat"]}],
    }
    path = workdir / "mindrouter-idle.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


async def measure(seconds: float, warmup: float) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="mr-idle-"))
    db = "mrbench_idle_" + uuid4().hex[:10]
    prefix = f"mrbench:{uuid4().hex[:12]}:"
    await _pg_execute(f'CREATE DATABASE "{db}"')
    servers: list[Server] = []
    try:
        servers += [await _sim(workdir, "sim-1"), await _sim(workdir, "sim-2")]
        config = _config(
            workdir, f"postgresql+asyncpg://postgres@{HOST}:5432/{db}", prefix, servers
        )
        _mindrouter_cli("migrate", "--config", str(config))
        port = free_port()
        log = workdir / "mindrouter.log"
        argv = [sys.executable, "-m", "mindrouter.cli", "serve", "--config", str(config)]
        gateway = Server("mindrouter", port, _spawn([*argv, "--port", str(port)], log, "1"), log)
        servers.append(gateway)
        await _wait_ready(gateway, "/healthz")
        await asyncio.sleep(warmup)
        gateway.refresh_pids()
        cpu0, tx0 = gateway.cpu(), await pg_transactions(db)
        await asyncio.sleep(seconds)
        cpu1 = gateway.cpu()
        # PostgreSQL publishes a backend's counts when it goes idle, up to ~10 s late.
        await asyncio.sleep(11)
        tx1 = await pg_transactions(db)
        cpu_s = cpu1 - cpu0
        return {
            "seconds": seconds,
            "cpu_seconds": round(cpu_s, 3),
            "core_percent": round(100 * cpu_s / seconds, 2),
            "pg_transactions_per_minute": round((tx1 - tx0) * 60 / (seconds + 11), 1),
        }
    finally:
        for s in reversed(servers):
            await s.stop()
        await _pg_execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        await _redis_delete(prefix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=15.0)
    ns = parser.parse_args()
    result = asyncio.run(measure(ns.seconds, ns.warmup))
    print(
        f"idle {result['seconds']:g} s: {result['cpu_seconds']} s CPU = "
        f"{result['core_percent']}% of a core; "
        f"{result['pg_transactions_per_minute']} PostgreSQL transactions a minute"
    )


if __name__ == "__main__":
    main()
