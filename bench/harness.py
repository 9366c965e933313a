"""Servers and requests shared by the benchmarks and the tests (which import them from here).

- `GatewayProcess`: `mindrouter serve --config FILE --port 0` as a real process, as deployed;
  `cli(...)` runs the administration commands the same way; `write_config` writes a config file.
- `OwnRedis`: a redis-server of one's own on a free port, which may be killed and started
  again empty (a shared server is never touched).
- Requests in each dialect for a gateway serving the one model `MODEL`: `PATHS`, `chat_body`,
  `bearer`.
- `stores_at`: the SQL stores of a database URL, closed on the way out (`FAST_HASHER` for keys).

Processes are always stopped: SIGTERM, then SIGKILL if they linger.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import redis
import yaml
from sqlalchemy.engine import make_url

from bench.ports import free_port
from mindrouter.identity.keys import KeyHasher
from mindrouter.stores.sql import SqlStores, open_stores

MODEL = "chat"
# Cheap Argon2 for keys made by benchmarks and tests, so that making many stays fast; the gateway
# reads the parameters from the hash, so they verify. Production keeps the defaults.
FAST_HASHER = KeyHasher(time_cost=1, memory_cost=8, parallelism=1)
CLI = [sys.executable, "-m", "mindrouter.cli"]
# Importing the app takes several seconds on a small machine; two at once take longer.
START_TIMEOUT = 90.0
STOP_TIMEOUT = 10.0
_LISTENING = re.compile(r"MindRouter listening on (http://\S+)")


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def child_env() -> dict[str, str]:
    # The config file alone decides where a child connects.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINDROUTER_")}
    env["PYTHONUNBUFFERED"] = "1"
    # A child's start is mostly imports; compiled once into a cache outside the tree, the later
    # children (and runs) skip compiling them again even where the environment turns caching off.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "mindrouter-test-pycache")
    return env


def cli(*args: str, timeout: float = 120.0) -> str:
    """Runs `mindrouter ARGS...`; its standard output, or a failure showing what it said."""
    done = subprocess.run(
        [*CLI, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(),
    )
    if done.returncode != 0:
        raise AssertionError(
            f"mindrouter {' '.join(args[:2])} exited {done.returncode}:\n{done.stderr}{done.stdout}"
        )
    return done.stdout


class GatewayProcess:
    """`mindrouter serve` in a child process; its output goes to `log_path`."""

    def __init__(self, config: Path, log_path: Path) -> None:
        self.config = config
        self.log_path = log_path
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> GatewayProcess:
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                [*CLI, "serve", "--config", str(self.config), "--port", "0"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=child_env(),
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Until the process has printed its address and answers /healthz."""
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        while not self.url:
            found = _LISTENING.search(self.log())
            if found:
                self.url = found.group(1)
                break
            self._check_alive(deadline)
            time.sleep(0.05)
        while True:
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            self._check_alive(deadline)
            time.sleep(0.05)

    def _check_alive(self, deadline: float) -> None:
        assert self._proc is not None
        if self._proc.poll() is not None:
            raise AssertionError(f"gateway exited {self._proc.returncode}:\n{self.log()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"gateway not ready in time:\n{self.log()}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)


class OwnRedis:
    """A redis-server on a free port of its own, holding nothing it was not given since it
    started (no RDB, no AOF): killing it loses everything, as a restart of an unpersisted
    server does."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.workdir = workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OwnRedis:
        """Starts with no data: nothing is saved or loaded."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        try:
            for _ in range(200):  # bounded wait for the port to answer
                try:
                    if client.ping():
                        return self
                except redis.exceptions.ConnectionError:
                    time.sleep(0.05)
        finally:
            client.close()
        raise AssertionError(f"redis-server on port {self.port} did not start")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def kill(self) -> None:
        """SIGKILL: everything it held is gone."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def restart_empty(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        self.kill()


@asynccontextmanager
async def stores_at(url: str, hasher: KeyHasher = FAST_HASHER) -> AsyncIterator[SqlStores]:
    """Stores on the caller's event loop, closed on the way out; keys made through them are
    hashed with `hasher`."""
    stores = open_stores(url, hasher=hasher)
    try:
        yield stores
    finally:
        await stores.aclose()


# -- requests in each dialect ------------------------------------------------------------------

DIALECTS = ("openai", "anthropic", "ollama")
PATHS = {
    "openai": "/v1/chat/completions",
    "anthropic": "/anthropic/v1/messages",
    "ollama": "/api/chat",
}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def chat_body(
    dialect: str, *, stream: bool, max_tokens: int = 8, text: str = "hi"
) -> dict[str, Any]:
    """A chat request for `MODEL` in the dialect's own shape, capped at `max_tokens`."""
    messages = [{"role": "user", "content": text}]
    if dialect == "ollama":
        options = {"num_predict": max_tokens}
        return {"model": MODEL, "messages": messages, "stream": stream, "options": options}
    return {"model": MODEL, "messages": messages, "stream": stream, "max_tokens": max_tokens}


# The PostgreSQL server the tests and the chaos soak make their databases on.
POSTGRES = make_url(
    os.environ.get("MINDROUTER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
)


async def postgres_admin(timeout: float = 5) -> asyncpg.Connection:
    """A connection to the server's `postgres` database, where CREATE and DROP DATABASE run."""
    return await asyncpg.connect(
        host=POSTGRES.host,
        port=POSTGRES.port or 5432,
        user=POSTGRES.username or "postgres",
        password=POSTGRES.password,
        database="postgres",
        timeout=timeout,
    )
