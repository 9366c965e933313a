"""Fairness benchmark, real-time end-to-end mode: a subset of the scenarios
driven through the HTTP gateway, `python -m bench.fairness.realtime [--short]`.

Testbed. Two simulated vLLM engines (`mindrouter sim --slots 2 --tokens-per-second 40`, one
process each), so 2 backends × 2 slots at 40 output tokens/s per slot. The gateway is the real
app (`bench/fairness/gateway_proc.py`, one process per replica) over one SQLite database with
groups of scheduler_weight 3 and 1 and one API key per user; only its capacity gate differs by
variant:

    fcfs                 one process, the gate over a FIFO queue (arrival order, `fifo.py`)
    round robin          one process, the gate over a queue where users take turns (`fifo.py`)
    ours                 one process, FairQueue over InMemoryFairShareState (today's app.py)
    ours, Redis state    one process, FairQueue over RedisFairShareState (what sharing costs)
    ours, 2 replicas     two processes, each its own gate and queue, sharing through Redis
                         what the app shares: the counters and the output still expected from
                         running streams (RedisFairShareState), and the backend slots with the
                         arbiter of free slots (SharedSlots): every backend's max_concurrent
                         (2) bounds both processes together; the clients split every user's
                         connections evenly between the two, as a load balancer would
    ours, 2 replicas, own slots       (only with --variant) the same without the slot board:
                         each process counts only its own requests, so each gets half of every
                         backend (max_concurrent 1) and gives its slots to its own waiters
    ours, 2 replicas, 10 ms sync      (only with --variant) as the line above, the counters
                         exchanged every 10 ms

Scenarios (every client streams, and records each chunk):

    weights  two users of weight 3 and two of weight 1, each keeping 4 requests outstanding
             (closed loop) for the whole run: everyone is backlogged on 4 slots;
    flood    one heavy user keeping 8 requests outstanding and four light users sending open-loop
             Poisson arrivals at 8 requests/min each (fixed seed).

Requests ask for 30–90 output tokens (0.75–2.25 s of a slot) with 20–60-word prompts, drawn from
fixed seeds, the same for every variant. They are shorter than in the simulated-clock mode (7.5 s)
so that a one-minute run still holds ~150 scheduling decisions; windows are correspondingly
shorter (20 s sliding by 5 s, 10 s by 2.5 s with --short) after a warm-up of 5 s (2.5 s).

This is a benchmark, not a test: nothing passes or fails, the figures are reported in
bench/results/fairness_realtime.{json,md} (`_short` with --short, `_TAG` with --tag TAG). Needs
Redis (127.0.0.1:6379 or --redis-url) for the shared variants. The machine is shared and small:
each run records the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import aiohttp
import orjson
from redis.asyncio import Redis

from bench.fairness import rt_metrics as m
from bench.fairness.rt_metrics import EngineRun, Shot
from mindrouter.settings import settings_from_dict
from mindrouter.stores.sql import apply_config, open_stores
from mindrouter.stores.sql.migrate import upgrade

ROOT = Path(__file__).resolve().parent.parent.parent
RESULTS = ROOT / "bench" / "results"
MODEL = "chat"
SIM_SLOTS = 2
SIM_BACKENDS = 2
TOKENS_PER_S = 40.0
OUTPUT_TOKENS = (30, 90)
PROMPT_WORDS = (20, 60)
START_TIMEOUT = 120.0
WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "near", "river")


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    queue: str  # fair | fifo | rr
    state: str  # memory | redis
    replicas: int
    sync_interval: float = 0.05  # RedisFairShareState's, when the state is shared
    shared_slots: bool = False  # the slot board (SharedSlots) between the replicas

    @property
    def slots_per_process(self) -> int:
        """Each backend's max_concurrent as configured in each process."""
        return SIM_SLOTS if self.shared_slots else SIM_SLOTS // self.replicas


VARIANTS = (
    Variant("fcfs", "fifo", "memory", 1),
    Variant("round robin", "rr", "memory", 1),
    Variant("ours", "fair", "memory", 1),
    Variant("ours, Redis state", "fair", "redis", 1),
    Variant("ours, 2 replicas", "fair", "redis", 2, shared_slots=True),
)
# Run only when named with --variant: without the slot board, and does the interval matter?
EXTRA_VARIANTS = (
    Variant("ours, 2 replicas, own slots", "fair", "redis", 2),
    Variant("ours, 2 replicas, 10 ms sync", "fair", "redis", 2, 0.01),
)
ALL_VARIANTS = VARIANTS + EXTRA_VARIANTS


@dataclass(frozen=True, slots=True)
class Closed:
    """A user keeping `lanes` requests outstanding: a new one as soon as one ends."""

    user: str
    weight: float
    lanes: int


@dataclass(frozen=True, slots=True)
class Open:
    """A user sending Poisson arrivals, whatever happens to the earlier ones."""

    user: str
    weight: float
    per_minute: float


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    what: str
    closed: tuple[Closed, ...]
    open: tuple[Open, ...]
    seed: int

    @property
    def weights(self) -> dict[str, float]:
        users: list[Closed | Open] = [*self.closed, *self.open]
        return {u.user: u.weight for u in users}


SCENARIOS = (
    Scenario(
        "weights",
        "two users of weight 3 and two of weight 1, 4 streams outstanding each",
        (Closed("w3-1", 3, 4), Closed("w3-2", 3, 4), Closed("w1-1", 1, 4), Closed("w1-2", 1, 4)),
        (),
        21,
    ),
    Scenario(
        "flood",
        "one heavy user with 8 streams outstanding, four light users at 8 req/min each",
        (Closed("heavy", 1, 8),),
        tuple(Open(f"light-{i}", 1, 8) for i in range(1, 5)),
        22,
    ),
)
GROUPS = {3.0: "weight-3", 1.0: "weight-1"}


# -- the request stream ----------------------------------------------------------------------------


TAG = re.compile(r"\[req ([^\]]+)\]")


def request_body(rng: random.Random, tag: str) -> tuple[dict[str, Any], int]:
    """A request, its prompt marked with `tag` so that the engine's record of it can be found."""
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(*PROMPT_WORDS)))
    max_tokens = rng.randint(*OUTPUT_TOKENS)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"[req {tag}] {words}"}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return body, max_tokens


async def stream_one(
    session: aiohttp.ClientSession,
    url: str,
    key: str,
    shot: Shot,
    body: dict[str, Any],
    t0: float,
) -> None:
    clock = time.monotonic
    try:
        async with session.post(
            f"{url}/v1/chat/completions",
            data=orjson.dumps(body),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        ) as resp:
            if resp.status != 200:
                shot.status = f"http {resp.status}"
                await resp.read()
                shot.end = clock() - t0
                return
            async for line in resp.content:
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                if data == b"[DONE]":
                    break
                now = clock() - t0
                chunk = orjson.loads(data)
                usage = chunk.get("usage")
                if usage:
                    shot.prompt_tokens = usage.get("prompt_tokens")
                    shot.output_tokens = usage.get("completion_tokens")
                for choice in chunk.get("choices") or ():
                    if (choice.get("delta") or {}).get("content"):
                        if shot.first is None:
                            shot.first = now
                        shot.chunks.append(now)
            shot.end = clock() - t0
            shot.status = "ok"
    except asyncio.CancelledError:
        shot.status = "cut at the end"
        raise
    except (aiohttp.ClientError, ValueError) as exc:
        shot.status = f"error {type(exc).__name__}"
        shot.end = clock() - t0


async def drive(
    scenario: Scenario, urls: list[str], keys: dict[str, str], duration: float, run: str
) -> tuple[list[Shot], float]:
    """Runs the scenario's clients against the gateways for `duration` seconds; returns what
    they saw and when the run started (`time.monotonic`, which the engines' records share)."""
    shots: list[Shot] = []
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        # Every key is verified once (Argon2) before the clock starts, on every gateway.
        warm = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        for user, key in keys.items():
            if user in scenario.weights:
                for url in urls:
                    async with session.post(
                        f"{url}/v1/chat/completions",
                        json=warm,
                        headers={"Authorization": f"Bearer {key}"},
                    ) as resp:
                        if resp.status != 200:
                            raise RuntimeError(f"warm-up for {user} failed: {await resp.text()}")
        await asyncio.sleep(0.5)
        t0 = time.monotonic()
        tasks: list[asyncio.Task[None]] = []

        async def lane(user: Closed, n: int) -> None:
            rng = random.Random(f"{scenario.seed}:{user.user}:{n}")
            gateway = n % len(urls)
            k = 0
            while True:
                tag = f"{run}:{user.user}/{n}/{k}"
                k += 1
                body, max_tokens = request_body(rng, tag)
                shot = Shot(user.user, gateway, time.monotonic() - t0, max_tokens, tag)
                shots.append(shot)
                await stream_one(session, urls[gateway], keys[user.user], shot, body, t0)
                if shot.status != "ok":
                    await asyncio.sleep(0.1)  # do not spin on errors

        async def arrivals(user: Open) -> None:
            rng = random.Random(f"{scenario.seed}:{user.user}")
            at, n = 0.0, 0
            while True:
                at += rng.expovariate(user.per_minute / 60.0)
                tag = f"{run}:{user.user}/{n}"
                body, max_tokens = request_body(rng, tag)
                delay = t0 + at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                gateway = n % len(urls)
                n += 1
                shot = Shot(user.user, gateway, time.monotonic() - t0, max_tokens, tag)
                shots.append(shot)
                tasks.append(
                    asyncio.create_task(
                        stream_one(session, urls[gateway], keys[user.user], shot, body, t0)
                    )
                )

        for c in scenario.closed:
            tasks += [asyncio.create_task(lane(c, n)) for n in range(c.lanes)]
        tasks += [asyncio.create_task(arrivals(o)) for o in scenario.open]
        await asyncio.sleep(duration)
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return shots, t0


async def engine_runs(
    sim_urls: list[str], t0: float, run: str, queued: dict[str, float]
) -> list[EngineRun]:
    """What the engines did with the tagged requests of `run`, which started at `t0`: when each
    held a slot, on the run's clock, with how long its gateway had queued it (`queued`)."""
    out: list[EngineRun] = []
    async with aiohttp.ClientSession() as session:
        for url in sim_urls:
            async with session.get(f"{url}/sim/requests") as resp:
                records = (await resp.json())["requests"]
            for r in records:
                found = TAG.search(orjson.dumps(r["body"]).decode())
                if found is None or r["started_at"] is None:
                    continue
                tag = found.group(1)
                if not tag.startswith(f"{run}:"):
                    continue
                end = None if r["finished_at"] is None else r["finished_at"] - t0
                out.append(EngineRun(tag, url, r["started_at"] - t0, end, queued.get(tag)))
    return out


def audit_queued(database: Path, run: str) -> dict[str, float]:
    """Seconds each tagged request of `run` waited in its gateway's queue, from the audit trail
    (the gateway's own measure, from the moment the request entered the queue)."""
    out: dict[str, float] = {}
    with contextlib.closing(sqlite3.connect(database)) as db:
        rows = db.execute(
            "SELECT messages, queued_ms FROM audit_records WHERE queued_ms IS NOT NULL"
        ).fetchall()
    for messages, queued_ms in rows:
        found = TAG.search(messages or "")
        if found is not None and found.group(1).startswith(f"{run}:"):
            out[found.group(1)] = queued_ms / 1000.0
    return out


# -- processes -------------------------------------------------------------------------------------


class Child:
    """A child process whose output is read line by line (and kept), stopped on request."""

    def __init__(self, proc: asyncio.subprocess.Process, name: str) -> None:
        self.proc = proc
        self.name = name
        self.lines: list[str] = []
        self._readers: list[asyncio.Task[None]] = []

    @classmethod
    async def spawn(cls, name: str, *argv: str, stdin: bool = False) -> Child:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        child = cls(proc, name)
        assert proc.stdout is not None and proc.stderr is not None
        child._readers = [
            asyncio.create_task(child._read(proc.stdout)),
            asyncio.create_task(child._read(proc.stderr)),
        ]
        return child

    async def _read(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.lines.append(line.decode(errors="replace").rstrip())

    async def wait_for(self, pattern: str, timeout: float = START_TIMEOUT) -> re.Match[str]:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for line in self.lines[seen:]:
                if found := rx.search(line):
                    return found
            seen = len(self.lines)
            if self.proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        tail = "\n".join(self.lines[-20:])
        raise RuntimeError(f"{self.name} did not print {pattern!r}:\n{tail}")

    async def stop(self, graceful: bool = True) -> None:
        proc = self.proc
        if proc.returncode is None:
            if graceful and proc.stdin is not None:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    proc.stdin.write(b"stop\n")
                    await proc.stdin.drain()
                    proc.stdin.close()
            else:
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await asyncio.gather(*self._readers, return_exceptions=True)


async def start_sims() -> tuple[list[Child], list[str]]:
    sims, urls = [], []
    for i in range(SIM_BACKENDS):
        child = await Child.spawn(
            f"sim-{i}",
            sys.executable,
            "-m",
            "mindrouter.cli",
            "sim",
            "--engine",
            "vllm",
            "--port",
            "0",
            "--model",
            MODEL,
            "--slots",
            str(SIM_SLOTS),
            "--tokens-per-second",
            str(TOKENS_PER_S),
            "--default-tokens",
            "4000",
        )
        sims.append(child)
    for child in sims:
        urls.append((await child.wait_for(r"on (http://\S+)")).group(1))
    return sims, urls


def gateway_settings(sim_urls: list[str], database_url: str, slots: int) -> dict[str, Any]:
    users: list[Closed | Open] = []
    for sc in SCENARIOS:
        users += sc.closed
        users += sc.open
    return {
        "database_url": database_url,
        "secret_key": "bench-secret",
        "log_level": "WARNING",
        # Without the slot board each replica holds its share of every backend.
        "backends": [
            {
                "name": f"sim-{i}",
                "engine": "vllm",
                "url": url,
                "models": [MODEL],
                "max_concurrent": slots,
            }
            for i, url in enumerate(sim_urls)
        ],
        "models": [{"name": MODEL, "context_length": 8192, "capabilities": ["chat"]}],
        "groups": [{"name": name, "scheduler_weight": w} for w, name in GROUPS.items()],
        "users": [{"name": u.user, "group": GROUPS[float(u.weight)]} for u in users],
    }


async def prepare_database(settings_raw: dict[str, Any]) -> dict[str, str]:
    """Migrates the database, applies the config, and makes one key per user."""
    settings = settings_from_dict(settings_raw)
    stores = open_stores(settings.database_url)
    try:
        await upgrade(stores.engine)
        await apply_config(stores, settings)
        keys = {}
        for user in settings.users:
            created = await stores.keys.create_key(user.name)
            keys[user.name] = created.key
        return keys
    finally:
        await stores.aclose()


async def start_gateways(
    variant: Variant, config: Path, redis_url: str, prefix: str
) -> tuple[list[Child], list[str]]:
    children = [
        await Child.spawn(
            f"gateway-{i}",
            sys.executable,
            "-m",
            "bench.fairness.gateway_proc",
            str(config),
            "--queue",
            variant.queue,
            "--state",
            variant.state,
            "--redis-url",
            redis_url,
            "--prefix",
            prefix,
            "--sync-interval",
            str(variant.sync_interval),
            *(["--shared-slots"] if variant.shared_slots else []),
            stdin=True,
        )
        for i in range(variant.replicas)
    ]
    try:
        urls = [(await c.wait_for(r"READY (http://\S+)")).group(1) for c in children]
    except BaseException:
        for c in children:
            await c.stop(graceful=False)
        raise
    return children, urls


async def stop_gateways(children: list[Child]) -> list[dict[str, Any]]:
    await asyncio.gather(*(c.stop() for c in children))
    stats = []
    for c in children:
        for line in c.lines:
            if line.startswith("STATS "):
                stats.append(json.loads(line[6:]))
    return stats


# -- one run ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timing:
    duration: float
    warmup: float
    window: float
    step: float


def figures(
    scenario: Scenario, variant: Variant, shots: list[Shot], t: Timing, engine: list[EngineRun]
) -> dict[str, Any]:
    a, b = t.warmup, t.duration
    slots = SIM_SLOTS * SIM_BACKENDS
    wins = m.windows(t.duration, t.warmup, t.window, t.step)
    out: dict[str, Any] = {
        "requests": len(shots),
        "completed": sum(1 for s in shots if s.status == "ok"),
        "errors": sorted({s.status for s in shots if s.status.startswith(("error", "http"))}),
        "tokens_per_s": m.tokens_per_second(shots, a, b),
        "utilisation": m.utilisation(shots, a, b, slots, t.duration),
        "shares": m.shares(shots, a, b),
    }
    weights = scenario.weights
    if scenario.name == "weights":
        errors, jains, worst = m.share_errors_and_jain(shots, weights, wins, t.duration)
        out["windows"] = len(wins)
        out["windows_with_backlog"] = len(worst)
        out["worst_share_error_pct_by_window"] = [[a, round(100.0 * e, 2)] for a, e in worst]
        out["share_error_pct"] = m.summary(errors, 100.0)
        out["jain"] = m.summary(jains)
        fair = {u: w / sum(weights.values()) for u, w in weights.items()}
        out["share_error_whole_run_pct"] = {
            u: 100.0 * (out["shares"].get(u, 0.0) / fair[u] - 1.0) for u in weights
        }
        got = m.service(m.service_events(shots), a, b)
        w3 = sum(v for u, v in got.items() if weights[u] == 3) / 2
        w1 = sum(v for u, v in got.items() if weights[u] == 1) / 2
        out["w3_to_w1_service_ratio"] = w3 / w1 if w1 else float("nan")
    else:
        light = {o.user for o in scenario.open}
        # With the slot board every gateway shares every slot; without, each owns its part.
        pool = slots if variant.shared_slots else slots // variant.replicas
        delays, strict, owed = m.light_delays(
            shots, light, pool, t.duration, pooled=variant.shared_slots
        )
        out["light_delay_ms"] = m.summary(delays, 1000.0)
        out["light_excess_delay_ms"] = m.summary(strict, 1000.0)
        out["light_excess_owed_ms"] = m.summary(owed, 1000.0)
        if variant.replicas == 1 or variant.shared_slots:
            # The same, with the slots as the engines held them: the gateway's own delay.
            strict, owed = m.engine_light_excess(shots, engine, light, slots, t.duration)
            out["light_engine_excess_delay_ms"] = m.summary(strict, 1000.0)
            out["light_engine_excess_owed_ms"] = m.summary(owed, 1000.0)
            strict, owed = m.engine_light_excess(
                shots, engine, light, slots, t.duration, from_queue=True
            )
            out["light_queue_excess_delay_ms"] = m.summary(strict, 1000.0)
            out["light_queue_excess_owed_ms"] = m.summary(owed, 1000.0)
        out["light_share_pct"] = 100.0 * sum(out["shares"].get(u, 0.0) for u in light)
    return out


async def run_one(
    scenario: Scenario,
    variant: Variant,
    sim_urls: list[str],
    configs: dict[int, Path],
    keys: dict[str, str],
    redis_url: str,
    t: Timing,
    database: Path,
) -> dict[str, Any]:
    run = uuid4().hex[:8]
    prefix = f"mrbench:{run}:"
    load_before = os.getloadavg()[0]
    config = configs[variant.slots_per_process]
    gateways, urls = await start_gateways(variant, config, redis_url, prefix)
    try:
        shots, t0 = await drive(scenario, urls, keys, t.duration, run)
    finally:
        stats = await stop_gateways(gateways)  # their audit records are all written now
        if variant.state == "redis":
            await delete_prefix(redis_url, prefix)
    engine = await engine_runs(sim_urls, t0, run, audit_queued(database, run))
    res = figures(scenario, variant, shots, t, engine)
    res["gateways"] = stats
    res["load_average_1m"] = [load_before, os.getloadavg()[0]]
    return res


async def delete_prefix(redis_url: str, prefix: str) -> None:
    client = Redis.from_url(redis_url)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


async def check_redis(redis_url: str) -> None:
    client = Redis.from_url(redis_url, socket_connect_timeout=2)
    try:
        await client.ping()
    except Exception as exc:
        raise SystemExit(
            f"the shared variants need Redis at {redis_url} (--redis-url to point elsewhere): {exc}"
        ) from exc
    finally:
        await client.aclose()


# -- the whole benchmark ---------------------------------------------------------------------------


def _median_of(runs: list[dict[str, Any]], *path: str) -> float:
    values = []
    for r in runs:
        v: Any = r
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        if isinstance(v, int | float):
            values.append(float(v))
    return statistics.median(values) if values else float("nan")


def summarise(res: dict[str, Any]) -> None:
    """The median over repeats of each headline figure, and the two-replica comparison."""
    heads = {
        "weights": [
            ("share_error_pct", "p95"),
            ("share_error_pct", "max"),
            ("share_error_pct", "p50"),
            ("jain", "mean"),
            ("jain", "min"),
            ("w3_to_w1_service_ratio",),
            ("tokens_per_s",),
            ("utilisation",),
        ],
        "flood": [
            ("light_delay_ms", "p50"),
            ("light_delay_ms", "p99"),
            ("light_excess_delay_ms", "p50"),
            ("light_excess_delay_ms", "p99"),
            ("light_excess_owed_ms", "p50"),
            ("light_excess_owed_ms", "p99"),
            ("light_engine_excess_owed_ms", "p99"),
            ("light_queue_excess_delay_ms", "p99"),
            ("light_queue_excess_owed_ms", "p50"),
            ("light_queue_excess_owed_ms", "p99"),
            ("light_share_pct",),
            ("tokens_per_s",),
            ("utilisation",),
        ],
    }
    for name, sc in res["scenarios"].items():
        sc["median"] = {
            v: {".".join(h): _median_of(runs, *h) for h in heads[name]}
            for v, runs in sc["runs"].items()
        }
    weights = res["scenarios"].get("weights", {}).get("median", {})
    one = weights.get("ours")
    two = weights.get("ours, 2 replicas") or weights.get("ours, 2 replicas, 10 ms sync")
    if one and two:
        deltas = {
            "share_error_p95_points": two["share_error_pct.p95"] - one["share_error_pct.p95"],
            "share_error_max_points": two["share_error_pct.max"] - one["share_error_pct.max"],
            "jain_mean_points": 100 * (two["jain.mean"] - one["jain.mean"]),
        }
        res["two_replicas_vs_one"] = {
            "deltas": deltas,
            "within_2_points": all(abs(d) <= 2.0 for d in deltas.values()),
        }


def fmt(value: float, kind: str) -> str:
    if value != value:  # NaN
        return "–"
    if kind == "ratio":
        return f"{value:.3f}"
    if kind == "pct":
        return f"{value:.1f}%"
    if kind == "share":
        return f"{100 * value:.1f}%"
    return f"{value:.0f}"


def markdown(res: dict[str, Any]) -> str:
    runs = [sc["runs"] for sc in res["scenarios"].values()]
    names = [v.name for v in ALL_VARIANTS if any(v.name in r for r in runs)]
    rows = {
        "weights": [
            ("share error p50 (windows)", "share_error_pct.p50", "pct"),
            ("share error p95 (target ≤ 5%)", "share_error_pct.p95", "pct"),
            ("share error max (target ≤ 10%)", "share_error_pct.max", "pct"),
            ("weighted Jain, mean (≥ 0.99)", "jain.mean", "ratio"),
            ("weighted Jain, worst window", "jain.min", "ratio"),
            ("service ratio weight 3 : weight 1 (fair: 3)", "w3_to_w1_service_ratio", "ratio"),
            ("output tokens/s (4 slots × 40 = 160 max)", "tokens_per_s", "num"),
            ("slot utilisation", "utilisation", "share"),
        ],
        "flood": [
            ("light-user delay to first token p50 (ms)", "light_delay_ms.p50", "num"),
            ("light-user delay to first token p99 (ms)", "light_delay_ms.p99", "num"),
            ("light excess over next free slot p50 (ms)", "light_excess_delay_ms.p50", "num"),
            ("light excess over next free slot p99 (ms)", "light_excess_delay_ms.p99", "num"),
            ("light excess over the owed slot p50 (ms)", "light_excess_owed_ms.p50", "num"),
            ("light excess over the owed slot p99 (ms)", "light_excess_owed_ms.p99", "num"),
            (
                "engines' slots, from sending: excess over the owed slot p99 (ms)",
                "light_engine_excess_owed_ms.p99",
                "num",
            ),
            (
                "engines' slots, from queueing: excess over next free slot p99 (ms)",
                "light_queue_excess_delay_ms.p99",
                "num",
            ),
            (
                "engines' slots, from queueing: excess over the owed slot p50 (ms)",
                "light_queue_excess_owed_ms.p50",
                "num",
            ),
            (
                "engines' slots, from queueing: excess over the owed slot p99 (ms; ≤ 100)",
                "light_queue_excess_owed_ms.p99",
                "num",
            ),
            ("light users' share of service", "light_share_pct", "pct"),
            ("output tokens/s", "tokens_per_s", "num"),
            ("slot utilisation", "utilisation", "share"),
        ],
    }
    t = res["timing"]
    lines = [
        "# Fairness, real-time end-to-end through the HTTP gateway",
        "",
        f"Mode: {'short' if res['short'] else 'full'}; {t['duration']:g} s per run, "
        f"{res['repeats']} run(s) per cell (medians shown); windows of {t['window']:g} s sliding "
        f"by {t['step']:g} s after {t['warmup']:g} s of warm-up. {res['testbed']}. "
        f"{res['cpus']} CPUs shared by the clients, the simulators and the gateways, with other "
        f"work running (load average {res['load_average_1m'][0]:.1f} at the start, "
        f"{res['load_average_1m'][1]:.1f} at the end). Generated by "
        "`python -m bench.fairness.realtime`; see its docstring for the variants.",
        "",
    ]
    for name, sc in res["scenarios"].items():
        lines += [f"## {name}: {sc['what']}", ""]
        present = [n for n in names if n in sc["median"]]
        lines.append("| figure | " + " | ".join(present) + " |")
        lines.append("|---|" + "---:|" * len(present))
        for label, key, kind in rows[name]:
            cells = [fmt(sc["median"][n].get(key, float("nan")), kind) for n in present]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
        if name == "weights":
            lines.append("Per-user share of service (fair: 37.5%, 37.5%, 12.5%, 12.5%):")
            lines.append("")
            for n in present:
                shares = sc["runs"][n][0]["shares"]
                text = ", ".join(f"{u} {100 * s:.1f}%" for u, s in shares.items())
                lines.append(f"- {n} (first run): {text}")
            lines.append("")
    cmp_ = res.get("two_replicas_vs_one")
    if cmp_:
        d = cmp_["deltas"]
        verdict = "yes" if cmp_["within_2_points"] else "no"
        lines += [
            "## Two replicas versus one (weights)",
            "",
            f"Within 2 points of the single process: **{verdict}** (share error p95 "
            f"{d['share_error_p95_points']:+.1f} points, max {d['share_error_max_points']:+.1f} "
            f"points, mean Jain {d['jain_mean_points']:+.2f} points).",
            "",
        ]
    lines += [
        "Client-side measurement: service is counted when chunks arrive at the client, slots "
        "are busy from a request's first to its last chunk. The \"engines' slots\" rows take "
        "the slots as the engines held them and a light request's start when an engine began "
        "it (one pool of 4 slots, so not for replicas that each own their part), counting "
        "from when the client sent it, or from when it entered its gateway's queue (the "
        "engine start less the queued time in the audit trail): the queueing delay the "
        "target speaks of, without the network and the gateway's admission. Wall-clock "
        "figures on a shared 2-core machine are noisy; compare variants within this run only.",
        "",
    ]
    return "\n".join(lines)


async def main_async(ns: argparse.Namespace) -> dict[str, Any]:
    duration = ns.duration or (20.0 if ns.short else 60.0)
    t = Timing(
        duration=duration,
        warmup=2.5 if ns.short else 5.0,
        window=ns.window or (10.0 if ns.short else 20.0),
        step=(ns.window or (10.0 if ns.short else 20.0)) / 4,
    )
    variants = [v for v in ALL_VARIANTS if v.name in ns.variant] if ns.variant else VARIANTS
    scenarios = [s for s in SCENARIOS if not ns.scenario or s.name in ns.scenario]
    if any(v.state == "redis" for v in variants):
        await check_redis(ns.redis_url)
    workdir = Path(tempfile.mkdtemp(prefix="mr-bench-rt-"))
    sims, sim_urls = await start_sims()
    res: dict[str, Any] = {
        "mode": "real time, through the HTTP gateway",
        "short": ns.short,
        "repeats": ns.repeats,
        "testbed": f"{SIM_BACKENDS} simulated vLLM backends × {SIM_SLOTS} slots, "
        f"{TOKENS_PER_S:g} output tokens/s per slot; requests of {OUTPUT_TOKENS[0]}–"
        f"{OUTPUT_TOKENS[1]} output tokens",
        "timing": dataclasses.asdict(t),
        "cpus": os.cpu_count(),
        "load_average_1m": [os.getloadavg()[0], float("nan")],
        "scenarios": {},
    }
    try:
        database = workdir / "mindrouter.db"
        database_url = f"sqlite+aiosqlite:///{database}"
        configs = {}
        for slots in {v.slots_per_process for v in variants}:
            path = workdir / f"gateway-{slots}.json"
            path.write_text(json.dumps(gateway_settings(sim_urls, database_url, slots)))
            configs[slots] = path
        keys = await prepare_database(gateway_settings(sim_urls, database_url, SIM_SLOTS))
        for scenario in scenarios:
            sc: dict[str, Any] = {"what": scenario.what, "runs": {}}
            res["scenarios"][scenario.name] = sc
            # Repeats interleave the variants (A B C D A B C D), so drifting load hits them alike.
            for rep in range(ns.repeats):
                for variant in variants:
                    print(
                        f"{scenario.name} / {variant.name} (run {rep + 1}/{ns.repeats}) ...",
                        flush=True,
                    )
                    figs = await run_one(
                        scenario, variant, sim_urls, configs, keys, ns.redis_url, t, database
                    )
                    sc["runs"].setdefault(variant.name, []).append(figs)
                    brief = {
                        k: figs[k]
                        for k in ("share_error_pct", "jain", "light_excess_owed_ms")
                        if k in figs
                    }
                    print(f"    {json.dumps(brief, default=str)[:300]}", flush=True)
    finally:
        for child in sims:
            await child.stop(graceful=False)
        shutil.rmtree(workdir, ignore_errors=True)
    res["load_average_1m"][1] = os.getloadavg()[0]
    summarise(res)
    return res


def _strict_json(value: Any) -> Any:
    """NaN (a figure that does not apply) becomes null, so the file is strict JSON."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict_json(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness.realtime", description=__doc__)
    parser.add_argument("--short", action="store_true", help="20 s runs instead of 60 s")
    parser.add_argument("--repeats", type=int, default=1, help="runs per variant (medians)")
    parser.add_argument("--duration", type=float, help="seconds per run (overrides --short)")
    parser.add_argument("--window", type=float, help="share-error window in seconds")
    parser.add_argument("--variant", action="append", help="only these variants (repeatable)")
    parser.add_argument("--scenario", action="append", help="only these scenarios (repeatable)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for the results")
    parser.add_argument(
        "--tag",
        help="suffix of the result files (default: 'short' with --short, none otherwise)",
    )
    ns = parser.parse_args(argv)
    res = asyncio.run(main_async(ns))
    ns.out.mkdir(parents=True, exist_ok=True)
    tag = ns.tag if ns.tag is not None else ("short" if ns.short else "")
    stem = f"fairness_realtime_{tag}" if tag else "fairness_realtime"
    json_path = ns.out / f"{stem}.json"
    md_path = ns.out / f"{stem}.md"
    json_path.write_text(json.dumps(_strict_json(res), indent=2, default=str) + "\n")
    md_path.write_text(markdown(res))
    print(markdown(res))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
