"""The live gateways the fuzzing suite attacks: `mindrouter serve` as real processes, as deployed,
one over SQLite and one over PostgreSQL, each with a fresh database of its own.

Simulated engines of every kind run in this process on their own threads (instant answers, so
that thousands of requests fit in the suite's time) and serve both gateways. The gateways run
as child processes, so their work runs on the other core while this process generates
requests, and each generated request is sent to both at once: the two databases see the same
requests for the price of generating them once. Each gateway's log (JSON lines, warnings and
up) is kept in a file: `Target.errors()` lists every error line and traceback it wrote.

Models follow `tests/gateway/stack.py` (`chat-vllm`, `think-ollama`, `vision-llamacpp`,
`embed-openai`, ...) plus the rerankers `rr-vllm` and `rr-llamacpp`. Users: `tester` (the
ordinary key) and `fuzz-admin` (the admin key), both in the group `testers`; the admin fuzzing
leaves these, the configured backends and models and the two keys alone, so that the inference
fuzzing keeps a working gateway whatever order the tests run in.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette

from mindrouter.app import build_app
from mindrouter.serving import ThreadServer
from mindrouter.settings import settings_from_dict
from mindrouter.sim import build_sim_app
from mindrouter.sim.config import SimModel
from mindrouter.stores.sql import apply_config
from tests.gateway.databases import stores_at
from tests.gateway.procs import GatewayProcess, write_config
from tests.gateway.stack import SIM_ENGINES, gateway_config, sim_config

ADMIN_USER = "fuzz-admin"
USER = "tester"
GROUP = "testers"
RERANKERS = {"rr-vllm": "vllm", "rr-llamacpp": "llamacpp"}


@dataclass
class Target:
    name: str  # the database: sqlite or postgresql
    key: str
    admin_key: str
    config: dict[str, Any]
    process: GatewayProcess
    key_refs: set[str]

    @property
    def url(self) -> str:
        return self.process.url

    @property
    def protected(self) -> set[str]:
        """Names and key references the admin fuzzing must not change or delete."""
        names = {USER, ADMIN_USER, GROUP}
        names |= {b["name"] for b in self.config["backends"]}
        names |= {m["name"] for m in self.config["models"]}
        return names | self.key_refs

    def errors(self) -> list[str]:
        """Error lines and tracebacks in the gateway's log."""
        found = []
        for line in self.process.log().splitlines():
            if line.startswith("{"):
                try:
                    entry = json.loads(line)
                except ValueError:
                    found.append(line)
                    continue
                if entry.get("level") in ("error", "critical"):
                    found.append(line)
            elif "Traceback" in line or line.startswith("ERROR"):
                found.append(line)
        return found


@dataclass
class Fleet:
    targets: list[Target]
    sims: list[ThreadServer]
    # The configuration built in this process and never served: its routes are what the
    # gateway processes serve.
    app: Starlette

    def close(self) -> None:
        for t in self.targets:
            t.process.stop()
        for s in self.sims:
            s.stop()


def _config(urls: dict[str, str], database_url: str) -> dict[str, Any]:
    config = gateway_config(urls, database_url=database_url, log_level="WARNING")
    config["users"].append({"name": ADMIN_USER, "group": GROUP})
    for model, engine in RERANKERS.items():
        backend = next(b for b in config["backends"] if b["engine"] == engine)
        backend["models"].append({"name": model, "upstream": model})
        config["models"].append({"name": model, "context_length": 8192, "capabilities": ["rerank"]})
    return config


async def _prepare(config: dict[str, Any]) -> tuple[str, str, set[str]]:
    async with stores_at(config["database_url"]) as stores:
        await apply_config(stores, settings_from_dict(config))
        user = await stores.keys.create_key(USER)
        admin = await stores.keys.create_key(ADMIN_USER, admin=True)
    refs = {str(k.info.id) for k in (user, admin)} | {k.info.prefix for k in (user, admin)}
    return user.key, admin.key, refs


def start_fleet(databases: dict[str, str], workdir: Path) -> Fleet:
    """A gateway process per entry of `databases` (name -> migrated database URL), all in
    front of one set of simulated engines."""
    fleet = Fleet([], [], Starlette())
    try:
        urls: dict[str, str] = {}
        for engine in SIM_ENGINES:
            cfg = sim_config(engine)
            cfg.models += [SimModel(m, kind="rerank") for m, e in RERANKERS.items() if e == engine]
            fleet.sims.append(ThreadServer(build_sim_app(cfg)).start())
            urls[engine] = fleet.sims[-1].url
        for name, database_url in databases.items():
            config = _config(urls, database_url)
            key, admin_key, refs = asyncio.run(_prepare(config))
            path = write_config(workdir / f"{name}.yaml", config)
            process = GatewayProcess(path, workdir / f"{name}.log").start()
            fleet.targets.append(Target(name, key, admin_key, config, process, refs))
        for t in fleet.targets:
            t.process.wait_ready()
        fleet.app = build_app(settings_from_dict(fleet.targets[0].config))
    except BaseException:
        fleet.close()
        raise
    return fleet
