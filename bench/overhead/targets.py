"""The processes under test: the mock, MindRouter in its two profiles, LiteLLM; and what they cost.

Every server is a child process. The gateways are pinned to core 1 (`taskset -c 1`); the mock and
this process (the load client) to core 0. CPU time and RSS are read from /proc for the whole
process tree of each server, so worker threads and any helper process are counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import uuid4

import yaml

from bench.overhead.client import get
from bench.ports import free_port

HOST = "127.0.0.1"
MODEL = "bench-model"
GATEWAY_CORE = "1"
CLIENT_CORE = "0"
PG_DSN = "postgresql://postgres@127.0.0.1:5432"
REDIS_URL = "redis://127.0.0.1:6379/0"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
REPO = Path(__file__).resolve().parents[2]


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(b")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def user_system(pids: list[int]) -> tuple[float, float]:
    """utime and stime of the given processes (all their threads), in seconds."""
    user = system = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        user += int(fields[11])
        system += int(fields[12])
    return user / CLK_TCK, system / CLK_TCK


def children_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each direct child of `pid` with its own descendants: per worker process
    of a server that runs several."""
    return {child: cpu_seconds(_tree(child)) for child in _tree(pid) if _ppid(child) == pid}


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except OSError:
        return None


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the given processes (all their threads), in seconds."""
    return sum(user_system(pids))


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1])
        except OSError:
            continue
    return total * PAGE / 2**20


@dataclass
class Server:
    """One server process and how to reach it."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path
    headers: dict[str, str] = field(default_factory=dict)
    pids: list[int] = field(default_factory=list)
    cleanup: list[Any] = field(default_factory=list)  # async callables, run at stop
    info: dict[str, Any] = field(default_factory=dict)

    def refresh_pids(self) -> None:
        self.pids = _tree(self.proc.pid)

    def cpu(self) -> float:
        return cpu_seconds(self.pids)

    def rss(self) -> float:
        return rss_mib(self.pids)

    async def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            for _ in range(100):
                if self.proc.poll() is not None:
                    break
                await asyncio.sleep(0.1)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        for step in self.cleanup:
            try:
                await step()
            except Exception as exc:
                print(f"  cleanup of {self.name} failed: {exc}", file=sys.stderr)


async def stop_all(servers: list[Server], *directories: Path) -> None:
    """Stops `servers`, the last started first, and removes the run's `directories`."""
    for server in reversed(servers):
        await server.stop()
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)


def _spawn(argv: list[str], log: Path, core: str, env: dict[str, str | None] | None = None) -> Any:
    """Starts `argv` pinned to `core`; `env` entries of None are removed from the environment."""
    pinned = ["taskset", "-c", core, *argv] if shutil.which("taskset") else argv
    environ = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    return subprocess.Popen(
        pinned,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=environ,
        cwd=str(log.parent),
    )


async def _wait_ready(server: Server, path: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            tail = server.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{server.name} exited at start:\n{tail}")
        try:
            await get(HOST, server.port, path, server.headers)
            server.refresh_pids()
            return
        except Exception as exc:
            last = exc
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{server.name} not ready after {timeout:g} s: {last}")


async def start_mock(workdir: Path) -> Server:
    port = free_port()
    log = workdir / "mock.log"
    proc = _spawn(
        [sys.executable, "-m", "bench.overhead.mock", "--port", str(port), "--model", MODEL],
        log,
        CLIENT_CORE,
        env={"PYTHONPATH": str(REPO)},
    )
    server = Server("mock", port, proc, log)
    try:
        await _wait_ready(server, "/health", 30)
    except BaseException:
        await server.stop()
        raise
    return server


# -- MindRouter ------------------------------------------------------------------------------


def mindrouter_config(
    profile: str,
    mock_port: int,
    workdir: Path,
    database_url: str,
    redis_prefix: str | None,
    extra: dict[str, Any] | None = None,
    stem: str | None = None,
) -> Path:
    governed = profile == "governed"
    big = governed  # limits high enough never to trigger; 0 means unlimited in the bare profile
    config: dict[str, Any] = {
        "database_url": database_url,
        "log_level": "WARNING",
        "secret_key": "bench-" + uuid4().hex,
        "timeouts": {"connect": 5, "first_byte": 30, "total": 60},
        "capacity_wait_s": 30,
        # Every benchmark client connects from 127.0.0.1: the per-address cap (64 by default)
        # would refuse all but 64 of 256 concurrent streams.
        "max_connections_per_client": 0,
        "groups": [
            {
                "name": "bench",
                "scheduler_weight": 1,
                "token_budget": 10**13 if big else 0,
                "rpm": 10**9 if big else 0,
                "max_concurrent": 10**6 if big else 0,
            }
        ],
        "users": [{"name": "bench", "group": "bench"}],
        "backends": [
            {
                "name": "mock",
                "engine": "openai",
                "url": f"http://{HOST}:{mock_port}",
                # Far above any concurrency the benchmark reaches: the fair gate runs its
                # decision for every request but never has to make one wait.
                "max_concurrent": 100_000,
                "models": [MODEL],
            }
        ],
        "models": [
            # A large context keeps the context-fitting stage from ever asking for a token count.
            {"name": MODEL, "context_length": 1_000_000, "capabilities": ["chat", "tools"]}
        ],
    }
    if governed:
        config["redis_url"] = REDIS_URL
        config["redis_prefix"] = redis_prefix
    config.update(extra or {})
    path = workdir / f"{stem or 'mindrouter-' + profile}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _mindrouter_cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mindrouter.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"mindrouter {' '.join(args)} failed:\n{done.stderr}{done.stdout}")
    return done.stdout


async def _pg_execute(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_DSN + "/postgres", timeout=10)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def pg_transactions(database: str) -> int:
    """Commits plus rollbacks so far in `database`: a count that, unlike CPU time on a shared
    machine, does not depend on the neighbours. A backend publishes its counts when it goes
    idle, up to about 10 s late, so callers read after a quiet spell."""
    import asyncpg

    conn = await asyncpg.connect(PG_DSN + "/postgres", timeout=10)
    try:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        row = await conn.fetchrow(
            "SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = $1",
            database,
        )
    finally:
        await conn.close()
    return int(row["n"]) if row else 0


def database_backends(database: str) -> list[int]:
    """The PostgreSQL server processes serving `database` on this machine: a backend's process
    title is `postgres: [CLUSTER: ]USER DATABASE HOST(PORT) STATE`."""
    name = database.encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                title = f.read().split(b"\0", 1)[0]
        except OSError:
            continue
        if title.startswith(b"postgres:") and name in title.split():
            pids.append(int(entry))
    return pids


async def _redis_delete(prefix: str) -> int:
    from redis.asyncio import Redis

    client = Redis.from_url(REDIS_URL)
    try:
        keys = [k async for k in client.scan_iter(match=prefix + "*", count=1000)]
        if keys:
            await client.delete(*keys)
        return len(keys)
    finally:
        await client.aclose()


async def governed_available() -> str | None:
    """None when PostgreSQL and Redis answer; otherwise why not."""
    try:
        await _pg_execute("SELECT 1")
    except Exception as exc:
        return f"PostgreSQL at 127.0.0.1:5432 unavailable: {exc}"
    try:
        from redis.asyncio import Redis

        client = Redis.from_url(REDIS_URL, socket_timeout=3)
        try:
            await client.ping()
        finally:
            await client.aclose()
    except Exception as exc:
        return f"Redis at 127.0.0.1:6379 unavailable: {exc}"
    return None


@dataclass(frozen=True)
class Variant:
    """How one MindRouter target differs from its profile's defaults."""

    name: str | None = None  # the server's name; `mindrouter-<profile>` by default
    config: dict[str, Any] = field(default_factory=dict)  # top-level settings over the profile's
    serve_args: tuple[str, ...] = ()  # after `serve --config F --port P`
    core: str = GATEWAY_CORE  # the `taskset -c` list


async def start_mindrouter(
    profile: str,
    mock_port: int,
    workdir: Path,
    launcher: list[str] | None = None,
    variant: Variant | None = None,
) -> Server:
    """`profile` is bare or governed. `launcher` replaces `python -m mindrouter.cli` (the
    profiling variants use it to start the same CLI with a different event loop)."""
    v = variant or Variant()
    name = v.name or f"mindrouter-{profile}"
    cleanup: list[Any] = []
    info: dict[str, Any] = {"profile": profile, **v.config}
    if v.serve_args:
        info["serve_args"] = " ".join(v.serve_args)
    redis_prefix = None
    if profile == "governed":
        db = "mrbench_" + uuid4().hex[:12]
        await _pg_execute(f'CREATE DATABASE "{db}"')

        async def drop_db() -> None:
            await _pg_execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

        cleanup.append(drop_db)
        database_url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{db}"
        redis_prefix = f"mrbench:{uuid4().hex[:12]}:"

        async def drop_keys() -> None:
            await _redis_delete(redis_prefix)

        cleanup.append(drop_keys)
        info.update(
            database="postgresql (fresh database, dropped afterwards)",
            database_name=db,
            redis=REDIS_URL,
        )
    else:
        database_url = f"sqlite+aiosqlite:///{workdir / 'bare.db'}"
        info.update(database="sqlite", redis=None)
    config = mindrouter_config(
        profile, mock_port, workdir, database_url, redis_prefix, v.config, name
    )
    try:
        # In a thread: several targets start at once (see run.Bench).
        await asyncio.to_thread(_mindrouter_cli, "migrate", "--config", str(config))
        key = await asyncio.to_thread(
            _mindrouter_cli, "keys", "create", "--config", str(config), "--user", "bench"
        )
        key = key.strip().splitlines()[-1].strip()
        port = free_port()
        log = workdir / f"{name}.log"
        argv = launcher or [sys.executable, "-m", "mindrouter.cli"]
        proc = _spawn(
            [*argv, "serve", "--config", str(config), "--port", str(port), *v.serve_args],
            log,
            v.core,
        )
    except BaseException:
        for step in cleanup:
            with contextlib.suppress(Exception):
                await step()
        raise
    server = Server(
        name,
        port,
        proc,
        log,
        headers={"authorization": f"Bearer {key}"},
        cleanup=cleanup,
        info=info,
    )
    try:
        await _wait_ready(server, "/healthz")
    except BaseException:
        await server.stop()
        raise
    return server


def source_at(rev: str, into: Path) -> Path:
    """The `src/` of git revision `rev`, extracted into `into`."""
    archive = subprocess.run(
        ["git", "archive", rev, "src"], cwd=REPO, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def cli_with(prelude: str, src: Path | None = None) -> list[str]:
    """argv that runs `prelude` (Python code: an instrument, a variant) in a new interpreter and
    then the `mindrouter` CLI, from `src` (a source tree's `src/`) or the installed package."""
    path = f"sys.path.insert(0, {str(src)!r}); " if src is not None else ""
    code = (
        f"import sys; {path}exec({prelude!r}); "
        "from mindrouter.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    return [sys.executable, "-c", code]


def workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="mrbench-"))
