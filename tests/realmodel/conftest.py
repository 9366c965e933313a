"""A real model behind the gateway: llama.cpp's `llama-server` serving Gemma 3 270M (Q4_K_M).

The binary and the GGUF file come from the cache that `scripts/realmodel setup` builds outside
the clone; its `env` file names both. Without it the suite fails (it never skips): a green run
must mean the real model answered.

Once per session: `llama-server` on a free loopback port, then an in-process gateway on a fresh
SQLite database with ONE backend (`engine: llamacpp`) serving the model as `gemma`, a user key
and an admin key.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from bench.ports import free_port

from mindrouter.app import build_app
from mindrouter.observability.logging import configure_logging
from mindrouter.serving import ThreadServer
from mindrouter.settings import Settings, settings_from_dict
from mindrouter.stores.sql import apply_config, open_stores
from mindrouter.stores.sql.migrate import upgrade
from tests.gateway.stack import sqlite_url

MODEL = "gemma"  # the gateway's name for it
# The same model under an entry that claims a larger context than llama-server has, so that a
# prompt the gateway lets through is refused by llama-server itself.
OVERSTATED = "gemma-overstated"
UPSTREAM = "gemma-3-270m"  # llama-server's --alias
CONTEXT = 2048
# Decoding is greedy (temperature 0); the seed is fixed as well so that nothing is left to chance.
SEED = 7
# Loading a 250 MB model on 2 busy cores takes a few seconds; the margin is for a loaded CI box.
START_TIMEOUT = 90.0


@dataclass(frozen=True)
class RealModelEnv:
    llama_server: Path
    gguf: Path


@dataclass
class LlamaServer:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """A request made directly to llama-server, bypassing the gateway: the reference."""
        resp = httpx.post(self.url + path, json=body, timeout=60)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def chat(self, messages: list[dict[str, Any]], max_tokens: int) -> Any:
        return self.post(
            "/v1/chat/completions",
            {
                "model": UPSTREAM,
                "messages": messages,
                "temperature": 0,
                "seed": SEED,
                "max_tokens": max_tokens,
            },
        )

    def complete(self, prompt: str, max_tokens: int) -> Any:
        return self.post(
            "/v1/completions",
            {
                "model": UPSTREAM,
                "prompt": prompt,
                "temperature": 0,
                "seed": SEED,
                "max_tokens": max_tokens,
            },
        )


@dataclass
class RealStack:
    gateway: ThreadServer
    llama: LlamaServer
    key: str
    admin_key: str

    @property
    def url(self) -> str:
        return self.gateway.url

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    @property
    def admin_auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}


def env_file() -> Path:
    cache = os.environ.get("MINDROUTER_CACHE") or str(Path.home() / ".cache" / "mindrouter")
    return Path(cache) / "realmodel" / "env"


def read_env(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() and not name.lstrip().startswith("#"):
            values[name.strip()] = value.strip()
    return values


@pytest.fixture(scope="session")
def realmodel_env() -> RealModelEnv:
    path = env_file()
    if not path.is_file():
        pytest.fail(
            f"the real-model cache is missing ({path} does not exist): run"
            " `scripts/realmodel setup` (or `scripts/realmodel test`, which builds it first)",
            pytrace=False,
        )
    values = read_env(path)
    server = Path(values.get("LLAMA_SERVER", ""))
    gguf = Path(values.get("GEMMA_GGUF", ""))
    if not (server.is_file() and os.access(server, os.X_OK) and gguf.is_file()):
        pytest.fail(
            f"{path} names LLAMA_SERVER={server} and GEMMA_GGUF={gguf}, which are not both there:"
            " run `scripts/realmodel setup` to rebuild the cache",
            pytrace=False,
        )
    return RealModelEnv(server, gguf)


def _wait_healthy(server: LlamaServer) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(
                f"llama-server exited with {server.proc.returncode} while starting:\n"
                + server.log()[-4000:],
                pytrace=False,
            )
        try:
            # 503 while the model loads, 200 once it can serve.
            if httpx.get(server.url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(
        f"llama-server did not become healthy in {START_TIMEOUT:.0f} s:\n" + server.log()[-4000:],
        pytrace=False,
    )


@pytest.fixture(scope="session")
def llama(
    realmodel_env: RealModelEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    port = free_port()
    log_path = tmp_path_factory.mktemp("llama") / "llama-server.log"
    cmd = [
        str(realmodel_env.llama_server),
        "--model",
        str(realmodel_env.gguf),
        "--alias",
        UPSTREAM,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--ctx-size",
        str(CONTEXT),
        "--parallel",
        "2",
        # Both slots share the whole context, so each request may use all of CONTEXT, which is
        # what the gateway's model entry promises.
        "--kv-unified",
        "--jinja",
        # Every prompt is evaluated whole: with a cached prefix llama-server evaluates fewer
        # tokens in a differently shaped batch, which shifts the logits enough to change a greedy
        # continuation now and then, and the tests compare texts with llama-server's own.
        "--no-cache-prompt",
        # ggml's threads wait for each other by spinning, so on two cores shared with the
        # gateway (and whatever else runs) two threads were several times slower than one.
        "--threads",
        "1",
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = LlamaServer(f"http://127.0.0.1:{port}", proc, log_path)
    try:
        _wait_healthy(server)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def gateway_config(llama_url: str, database_url: str) -> dict[str, Any]:
    return {
        "database_url": database_url,
        "secret_key": "test-secret",
        "log_level": "WARNING",
        # A failed request must show llama-server's own answer, not a retry of it.
        "max_attempts": 1,
        "backends": [
            {
                "name": "llamacpp-1",
                "engine": "llamacpp",
                "url": llama_url,
                "max_concurrent": 2,
                "models": [
                    {"name": MODEL, "upstream": UPSTREAM},
                    {"name": OVERSTATED, "upstream": UPSTREAM},
                ],
            }
        ],
        "models": [
            {"name": MODEL, "context_length": CONTEXT, "capabilities": ["chat"]},
            {"name": OVERSTATED, "context_length": 4 * CONTEXT, "capabilities": ["chat"]},
        ],
        "groups": [{"name": "testers", "scheduler_weight": 1}],
        "users": [{"name": "tester", "group": "testers"}, {"name": "root", "group": "testers"}],
    }


async def _prepare(settings: Settings) -> tuple[str, str]:
    stores = open_stores(settings.database_url)
    try:
        await upgrade(stores.engine)
        await apply_config(stores, settings)
        user = await stores.keys.create_key("tester")
        admin = await stores.keys.create_key("root", admin=True)
        return user.key, admin.key
    finally:
        await stores.aclose()


@pytest.fixture(scope="session")
def real(llama: LlamaServer) -> Iterator[RealStack]:
    settings = settings_from_dict(gateway_config(llama.url, sqlite_url()))
    # As `mindrouter serve` does: otherwise every request's log line goes to stdout from the
    # server thread, in between pytest's captured sections.
    configure_logging(settings.log_level)
    key, admin_key = asyncio.run(_prepare(settings))
    gateway = ThreadServer(build_app(settings)).start()
    try:
        yield RealStack(gateway, llama, key, admin_key)
    finally:
        gateway.stop()


@pytest.fixture(scope="session")
def oai(real: RealStack) -> openai.OpenAI:
    return openai.OpenAI(base_url=real.url + "/v1", api_key=real.key, max_retries=0, timeout=60)


@pytest.fixture(scope="session")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60) as client:
        yield client
