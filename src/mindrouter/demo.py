"""`mindrouter demo`: the gateway with zero configuration.

Starts a simulated vLLM server and a simulated Ollama server in this process, points a gateway at
them (SQLite under ./.mindrouter/, in-memory counters) and prints a request that works as pasted.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shlex
from pathlib import Path

from mindrouter.app import build_app
from mindrouter.identity.passwords import Passwords
from mindrouter.observability.logging import configure_logging
from mindrouter.serving import InLoopServer
from mindrouter.settings import Settings, settings_from_dict
from mindrouter.sim import build_sim_app
from mindrouter.sim.config import SimConfig, SimModel
from mindrouter.stores.sql import apply_config, open_stores
from mindrouter.stores.sql.migrate import upgrade

STATE_DIR = Path(".mindrouter")
CHAT_MODEL = "llama-3.1-8b-instruct"
ADMIN = "admin"  # the demo's console administrator


def _sims() -> tuple[SimConfig, SimConfig]:
    vllm = SimConfig(
        engine="vllm",
        models=[
            SimModel("llama-3.1-8b-instruct", 32768),
            SimModel("qwen3-8b", 32768),
            SimModel("qwen2.5-vl-7b", 32768, kind="vision"),
            SimModel("nomic-embed-text", 8192, kind="embedding"),
            SimModel("bge-reranker-v2-m3", 8192, kind="rerank"),
        ],
        slots=4,
        tokens_per_second=60,
        ttft_ms=40,
    )
    ollama = SimConfig(
        engine="ollama",
        models=[
            SimModel("qwen3:8b", 32768),
            SimModel("gemma3:4b", 8192),
            SimModel("nomic-embed-text:latest", 8192, kind="embedding"),
        ],
        slots=2,
        tokens_per_second=40,
        ttft_ms=60,
    )
    return vllm, ollama


def demo_settings(vllm_url: str, ollama_url: str, host: str, port: int) -> Settings:
    STATE_DIR.mkdir(mode=0o700, exist_ok=True)
    secret_file = STATE_DIR / "secret_key"
    if not secret_file.exists():
        # Readable by its owner only, from the moment it exists.
        fd = os.open(secret_file, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
    return settings_from_dict(
        {
            "database_url": f"sqlite+aiosqlite:///{STATE_DIR / 'mindrouter.db'}",
            "host": host,
            "port": port,
            "secret_key": secret_file.read_text().strip(),
            "log_level": "WARNING",
            "groups": [
                {"name": "faculty", "scheduler_weight": 3},
                {"name": "students", "scheduler_weight": 1},
            ],
            "users": [{"name": "demo", "group": "faculty"}, {"name": ADMIN, "group": "faculty"}],
            "backends": [
                {
                    "name": "vllm-sim",
                    "engine": "vllm",
                    "url": vllm_url,
                    "gpu": "H200",
                    "max_concurrent": 4,
                    "models": [
                        "llama-3.1-8b-instruct",
                        "qwen3-8b",
                        "qwen2.5-vl-7b",
                        "nomic-embed-text",
                        "bge-reranker-v2-m3",
                    ],
                },
                {
                    "name": "ollama-sim",
                    "engine": "ollama",
                    "url": ollama_url,
                    "gpu": "A100",
                    "max_concurrent": 2,
                    "models": [
                        {"name": "qwen3-8b", "upstream": "qwen3:8b"},
                        {"name": "gemma3-4b", "upstream": "gemma3:4b"},
                        {"name": "nomic-embed-text", "upstream": "nomic-embed-text:latest"},
                    ],
                },
            ],
            "models": [
                {
                    "name": "llama-3.1-8b-instruct",
                    "context_length": 32768,
                    "capabilities": ["chat", "tools"],
                },
                {
                    "name": "qwen3-8b",
                    "context_length": 32768,
                    "capabilities": ["chat", "tools", "thinking"],
                    "aliases": ["qwen3:8b"],
                },
                {
                    "name": "qwen2.5-vl-7b",
                    "context_length": 32768,
                    "capabilities": ["chat", "vision"],
                },
                {"name": "gemma3-4b", "context_length": 8192, "capabilities": ["chat"]},
                {
                    "name": "nomic-embed-text",
                    "context_length": 8192,
                    "capabilities": ["embedding"],
                },
                {
                    "name": "bge-reranker-v2-m3",
                    "context_length": 8192,
                    "capabilities": ["rerank"],
                },
            ],
        }
    )


def curl_line(base_url: str, key: str) -> str:
    body = {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": "Hello, who are you?"}],
    }
    return (
        f"curl -s {base_url}/v1/chat/completions -H 'Authorization: Bearer {key}' "
        f"-H 'Content-Type: application/json' -d {shlex.quote(json.dumps(body))}"
    )


async def prepare_database(settings: Settings) -> tuple[str, str]:
    """Migrates the demo database, applies the demo config, makes a fresh key for `demo` and a
    fresh console password for the demo administrator `admin`."""
    stores = open_stores(settings.database_url, audit_commit=settings.audit_commit)
    try:
        await upgrade(stores.engine)
        await apply_config(stores, settings)
        created = await stores.keys.create_key("demo", name="demo")
        password = secrets.token_urlsafe(12)
        hashed = await Passwords().hash(password)
        await stores.accounts.save(ADMIN, password_hash=hashed, is_admin=True)
        await stores.accounts.save("demo", password_hash=hashed)
        return created.key, password
    finally:
        await stores.aclose()


async def run_demo(host: str, port: int) -> None:
    configure_logging("WARNING")
    vllm_cfg, ollama_cfg = _sims()
    sims = [InLoopServer(build_sim_app(vllm_cfg)), InLoopServer(build_sim_app(ollama_cfg))]
    for s in sims:
        await s.start()
    settings = demo_settings(sims[0].url, sims[1].url, host, port)
    key, password = await prepare_database(settings)
    gateway = InLoopServer(build_app(settings), host=host, port=port)
    print(f"MindRouter demo is running at {gateway.url}")
    print(f"  simulated vLLM backend:   {sims[0].url}")
    print(f"  simulated Ollama backend: {sims[1].url}")
    print("  models: " + ", ".join(m.name for m in settings.models))
    print(f"  API key (user 'demo', group 'faculty'): {key}")
    print()
    print("Try it:")
    print("  " + curl_line(gateway.url, key))
    print()
    print(f"OpenAI SDK:    OpenAI(base_url='{gateway.url}/v1', api_key='{key}')")
    print(f"Anthropic SDK: Anthropic(base_url='{gateway.url}/anthropic', api_key='{key}')")
    print(
        f"Ollama SDK:    Client(host='{gateway.url}', headers={{'Authorization': 'Bearer {key}'}})"
    )
    print()
    print(f"Web console:   {gateway.url}/console/  (status page: {gateway.url}/console/status)")
    print(f"  sign in as '{ADMIN}' (administrator) or 'demo', password: {password}")
    print("Press Ctrl-C to stop.", flush=True)
    try:
        await gateway.serve_forever()
    finally:
        for s in sims:
            await s.stop()


def main(host: str, port: int) -> int:
    try:
        asyncio.run(run_demo(host, port))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"mindrouter demo: cannot listen on {host}:{port}: {exc.strerror}. Try --port.")
        return 1
    return 0
