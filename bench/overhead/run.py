"""The overhead benchmark: scenarios, interleaved over the targets, and the figures from them.

Targets: `direct` (the client straight to the mock: the baseline), `floor` (a bare Starlette +
aiohttp relay), `mindrouter-governed` (PostgreSQL + Redis, `audit_commit: durable`),
`mindrouter-governed-fast` (the same with `audit_commit: fast`), `litellm`, and the workers rows
`mindrouter-governed-2w` (`serve --workers 2`) and `litellm-2w` (`--num_workers 2`). Every
scenario runs its targets in turn, in the same order, round after round (A B A B), so slow drift
of a shared machine spreads over all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.overhead import figures, floor, report, scenarios, targets
from bench.overhead.client import (
    Pool,
    Result,
    closed_loop,
    get,
    open_loop,
    percentile,
    post,
    post_once,
)
from bench.overhead.targets import GATEWAY_CORE, HOST, MODEL, Server, Variant

DIRECT = "direct"
FLOOR = "floor"
BARE = "mindrouter-bare"
GOVERNED = scenarios.GOVERNED
FAST = scenarios.FAST
LITELLM = scenarios.LITELLM
GOVERNED_2W = scenarios.GOVERNED_2W
LITELLM_2W = scenarios.LITELLM_2W
ORDER = (DIRECT, FLOOR, GOVERNED, FAST, LITELLM, GOVERNED_2W, LITELLM_2W)
# The machine has two cores: one process gets core 1, two workers get both, and so share core 0
# with the load client and the mock (the workers rows compare CPU per request and the balance
# between the workers, not latency).
GATEWAY_CORES = {1: GATEWAY_CORE, 2: "0,1"}
MINDROUTER_TARGETS = {
    GOVERNED: Variant(GOVERNED, {"audit_commit": "durable"}),
    FAST: Variant(FAST, {"audit_commit": "fast"}),
    GOVERNED_2W: Variant(
        GOVERNED_2W, {"audit_commit": "durable"}, ("--workers", "2"), GATEWAY_CORES[2]
    ),
}
# Who takes part in what. The floor relays unary requests only; the workers targets only run
# the workers rows.
SWEEP = (DIRECT, FLOOR, GOVERNED, FAST, LITELLM)
UP_TO_FIXED_RATE = (FLOOR,)  # the floor's figure is its CPU per request at the fixed rate
STREAMING = (DIRECT, GOVERNED, FAST, LITELLM)
ACTIVE = (DIRECT, BARE, GOVERNED, LITELLM)  # large prompt, Anthropic format, disconnect
SOAK = (GOVERNED,)
RESULTS = Path(__file__).resolve().parents[1] / "results"

STREAM_CHUNKS = 64
STREAM_GAP_MS = 10.0
FIRST_TOKEN_MS = 20.0


@dataclass(frozen=True)
class Plan:
    """How much of everything to run: the full benchmark or the short routine one."""

    short: bool
    rates: tuple[int, ...]
    step_s: float
    rounds: int
    stream_concurrency: tuple[int, ...]
    stream_s: float
    bisect: int  # bisection steps between the last rate held and the first that failed
    large_prompt: bool
    anthropic: bool
    disconnect: int  # streams cancelled per target; 0 = skip
    soak_s: float  # per gateway; 0 = skip
    timeout_s: float = 5.0  # per request in the sweep
    quiesce_s: float = 20.0  # at most, for a gateway to work off its backlog between steps
    fixed_rate: int = 200
    parity_s: float = 3.0  # per kind and round: the mock's unary answer against its stream
    workers_s: float = 10.0  # per target and round in the workers rows
    commit_probe_n: int = 500  # single-row commits, at the start and at the end

    @staticmethod
    def full() -> Plan:
        return Plan(
            short=False,
            rates=(50, 100, 200, 300, 400, 500, 650, 800, 1000, 1250, 1500, 2000),
            step_s=10.0,
            rounds=2,
            stream_concurrency=(4, 16, 32, 64, 128, 256),
            stream_s=8.0,
            bisect=2,
            large_prompt=True,
            anthropic=True,
            disconnect=100,
            soak_s=45.0,
        )

    @staticmethod
    def quick() -> Plan:
        return Plan(
            short=True,
            rates=(100, 200, 400),
            step_s=3.0,
            rounds=1,
            stream_concurrency=(4, 16, 32, 64),
            stream_s=2.0,
            bisect=0,
            large_prompt=False,
            anthropic=False,
            disconnect=0,
            soak_s=0.0,
            timeout_s=3.0,
            quiesce_s=5.0,
            parity_s=1.0,
            workers_s=3.0,
            commit_probe_n=200,
        )


@dataclass
class Target:
    name: str
    server: Server  # for `direct`, the mock itself
    headers: dict[str, str]
    pool: Pool
    chat_path: str = "/v1/chat/completions"
    anthropic_path: str | None = None
    rss_samples: list[tuple[float, float]] = field(default_factory=list)
    idle: dict[str, float] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return self.server.port

    def raw(self, body: bytes, path: str | None = None) -> bytes:
        return post(HOST, self.port, path or self.chat_path, body, self.headers)


# In a request's messages: the mock answers a stream of it with the unary reply at once (see
# bench/overhead/mock.py), as a gateway that collects an engine stream for a unary request needs.
WHOLE = " [whole]"


def chat_body(
    *,
    stream: bool = False,
    content: str = "Say something.",
    whole: bool | None = None,
    **extra: Any,
) -> bytes:
    """`whole` (default: for a non-streamed request) adds the mock's `[whole]` marker."""
    if whole if whole is not None else not stream:
        content += WHOLE
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 256,
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return orjson.dumps(body)


def large_prompt_body() -> bytes:
    """~100 KB of conversation and ten tools, as an agent's request looks."""
    paragraph = (
        "The quarterly report lists revenue by region, the cost of goods sold, and the operating "
        "margin, with notes on currency effects and one-off items that the auditors flagged. "
    )
    history = []
    for i in range(40):
        role = "user" if i % 2 == 0 else "assistant"
        history.append({"role": role, "content": f"[{i}] " + paragraph * 14})
    history[-1]["content"] += WHOLE
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": f"Looks up record kind {i} by its identifier and returns the "
                "fields asked for, with their provenance.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "description": "the record identifier"},
                        "fields": {"type": "array", "items": {"type": "string"}},
                        "as_of": {"type": "string", "format": "date"},
                    },
                    "required": ["id"],
                },
            },
        }
        for i in range(10)
    ]
    return orjson.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "system", "content": "You are a careful analyst."}, *history],
            "tools": tools,
            "max_tokens": 256,
        }
    )


def anthropic_body() -> bytes:
    return orjson.dumps(
        {
            "model": MODEL,
            "max_tokens": 256,
            "messages": [{"role": "user", "content": "Say something." + WHOLE}],
        }
    )


# -- measuring -----------------------------------------------------------------------------------


def unary_summary(results: list[Result], t0: float, rate: float | None) -> dict[str, Any]:
    ok = [r for r in results if r.ok]
    lat = [r.latency * 1000 for r in ok]
    errors = Counter(r.error or f"HTTP {r.status}" for r in results if not r.ok)
    out: dict[str, Any] = {
        "requests": len(results),
        "ok": len(ok),
        "errors": sum(errors.values()),
        "error_rate": (len(results) - len(ok)) / len(results) if results else 0.0,
        "error_kinds": dict(errors.most_common(5)),
        "p50_ms": percentile(lat, 50),
        "p90_ms": percentile(lat, 90),
        "p99_ms": percentile(lat, 99),
        "max_ms": max(lat) if lat else float("nan"),
        "mean_ms": statistics.fmean(lat) if lat else float("nan"),
    }
    if rate is not None and ok:
        span = max(r.done for r in ok) - t0
        intended = len(results) / rate
        out["offered_rps"] = rate
        out["achieved_rps"] = len(ok) / max(span, intended)
        out["achieved_ratio"] = out["achieved_rps"] / rate
    elif rate is not None:
        out.update(offered_rps=rate, achieved_rps=0.0, achieved_ratio=0.0)
    return out


def stream_summary(results: list[Result], chunks_sent: int) -> dict[str, Any]:
    ok = [r for r in results if r.ok and r.events]
    ttft = [(r.events[0] - r.sent) * 1000 for r in ok]
    counts = [len(r.events) for r in ok]
    gaps = [(b - a) * 1000 for r in ok for a, b in zip(r.events, r.events[1:], strict=False)]
    events = sum(counts)
    reads = sum(r.reads for r in ok)
    return {
        "streams": len(results),
        "ok": len(ok),
        "errors": len(results) - len(ok),
        "error_rate": (len(results) - len(ok)) / len(results) if results else 0.0,
        "error_kinds": dict(
            Counter(r.error or f"HTTP {r.status}" for r in results if not r.ok).most_common(5)
        ),
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p99_ms": percentile(ttft, 99),
        "chunks_sent": chunks_sent,
        "chunks_received_min": min(counts) if counts else 0,
        "chunks_received_median": statistics.median(counts) if counts else 0,
        # Fewer content events than the backend sent: the gateway merged deltas.
        "coalesced_streams": sum(1 for c in counts if c < chunks_sent),
        # Events that arrived in the same socket read as the one before them (the client may
        # simply have read late; only coalesced_streams is a statement about the gateway).
        "same_read_fraction": (events - reads) / events if events else 0.0,
        "gap_p50_ms": percentile(gaps, 50),
        "gap_p99_ms": percentile(gaps, 99),
        "gap_max_ms": max(gaps) if gaps else float("nan"),
        "gap_distortion_p99_ms": percentile([abs(g - STREAM_GAP_MS) for g in gaps], 99),
        "duration_p50_ms": percentile([(r.events[-1] - r.sent) * 1000 for r in ok], 50),
    }


class Bench:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.targets: dict[str, Target] = {}
        self.points: list[dict[str, Any]] = []
        self.skipped: dict[str, str] = {}
        self.notes: list[str] = []
        self.load: list[tuple[float, float]] = []
        self.started = time.time()
        self.servers: list[Server] = []
        self.mock: Server | None = None

    # -- set-up --------------------------------------------------------------------------------

    async def setup(self) -> None:
        workdir = targets.workdir()
        self.workdir = workdir
        print(f"work directory {workdir}", flush=True)
        mock = await targets.start_mock(workdir)
        self.mock = mock
        self.servers.append(mock)
        self.targets[DIRECT] = Target(DIRECT, mock, {}, Pool(HOST, mock.port))
        await self._configure_mock()

        await self._start_gateways(mock.port, workdir)
        for t in self.targets.values():
            await self._warm(t)
        await asyncio.sleep(1.0)
        for t in self.targets.values():
            t.server.refresh_pids()
            cpu0 = t.server.cpu()
            await asyncio.sleep(2.0)
            t.idle = {"rss_mib": t.server.rss(), "cpu_pct": (t.server.cpu() - cpu0) / 2.0 * 100}
            print(f"  {t.name}: idle RSS {t.idle['rss_mib']:.1f} MiB", flush=True)

    async def _start_gateways(self, mock_port: int, workdir: Path) -> None:
        """Every gateway at once (LiteLLM's start-up is slow and mostly waiting); MindRouter's
        migrations and key creation run one after the other in the meantime."""
        why = await targets.governed_available()
        starts: dict[str, Any] = {}
        for name, workers in ((LITELLM, 1), (LITELLM_2W, 2)):
            starts[name] = targets.start_litellm(
                mock_port, workdir, workers, GATEWAY_CORES[workers]
            )
        starts[FLOOR] = floor.start_floor(mock_port, workdir)
        for name, variant in MINDROUTER_TARGETS.items():
            if why is None:
                starts[name] = targets.start_mindrouter(
                    "governed", mock_port, workdir, None, variant
                )
            else:
                self.skipped[name] = why
        done = await asyncio.gather(*starts.values(), return_exceptions=True)
        for name, got in zip(starts, done, strict=True):
            if isinstance(got, BaseException):
                self.skipped[name] = f"could not be started: {str(got)[:800]}"
                print(f"skipping {name}: {str(got)[:500]}", flush=True)
                continue
            self.servers.append(got)
            if name in (GOVERNED_2W, LITELLM_2W):
                got.info["workers"] = 2
                got.info["cores"] = GATEWAY_CORES[2]
            anthropic = "/v1/messages" if name.startswith("litellm") else "/anthropic/v1/messages"
            self._add(name, got, None if name == FLOOR else anthropic)
        self.targets = {n: self.targets[n] for n in ORDER if n in self.targets}

    def _add(self, name: str, server: Server, anthropic: str | None) -> None:
        headers = dict(server.headers)
        self.targets[name] = Target(
            name, server, headers, Pool(HOST, server.port), anthropic_path=anthropic
        )

    async def _configure_mock(self) -> None:
        assert self.mock is not None
        cfg = {"first_token_ms": FIRST_TOKEN_MS, "chunks": STREAM_CHUNKS, "gap_ms": STREAM_GAP_MS}
        await post_once(HOST, self.mock.port, "/_config", orjson.dumps(cfg))

    async def _warm(self, t: Target) -> None:
        """Connections, caches, the key lookup, lazy imports: none of that belongs in a figure."""
        # Gently: a peer that saturates early must not spend the run working off its warm-up.
        results, _ = await open_loop(t.pool, t.raw(chat_body()), 25, 2.0, timeout=15)
        bad = [r for r in results if not r.ok]
        if len(bad) == len(results):
            raise RuntimeError(f"{t.name} answers nothing during warm-up: {bad[0].error}")
        if t.name in STREAMING:
            await closed_loop(t.pool, t.raw(chat_body(stream=True)), 4, 1.0, stream=True)
        await self.quiesce(t)

    @contextlib.contextmanager
    def alone(self, t: Target) -> Iterator[None]:
        """Runs a measurement of `t` with every other gateway paused (SIGSTOP), so that a peer
        still working off the backlog of a rate it could not sustain (and the queue waits
        `quiesce_s` at most for that) takes no CPU from the gateway measured now; they share
        core 1. The mock is never paused."""
        others = [
            o.server for o in self.targets.values() if o is not t and o.server is not self.mock
        ]
        paused: list[int] = []
        try:
            for server in others:
                server.refresh_pids()
                for pid in server.pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGSTOP)
                        paused.append(pid)
            yield
        finally:
            for pid in paused:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    async def quiesce(self, t: Target) -> None:
        """Waits until `t` has stopped working off a backlog (its CPU use falls below 10 %)."""
        deadline = time.monotonic() + self.plan.quiesce_s
        t.server.refresh_pids()
        while time.monotonic() < deadline:
            c0 = t.server.cpu()
            await asyncio.sleep(0.3)
            if (t.server.cpu() - c0) / 0.3 < 0.10:
                return

    # -- sampling ------------------------------------------------------------------------------

    async def sample(self) -> None:
        last_load = 0.0
        while True:
            now = time.monotonic()
            for t in self.targets.values():
                if t.name != DIRECT:
                    t.rss_samples.append((now, t.server.rss()))
            if now - last_load >= 5:
                last_load = now
                self.load.append((time.time() - self.started, os.getloadavg()[0]))
            await asyncio.sleep(0.5)

    # -- scenarios -----------------------------------------------------------------------------

    def active(self) -> list[Target]:
        """The targets of the large-prompt, Anthropic-format and disconnect scenarios."""
        return [t for t in self.targets.values() if t.name in ACTIVE]

    @property
    def streaming(self) -> tuple[str, ...]:
        return STREAMING

    async def unary_step(
        self,
        t: Target,
        scenario: str,
        raw: bytes,
        rate: int,
        duration: float,
        round_: int,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        t.server.refresh_pids()
        with self.alone(t):
            cpu0 = t.server.cpu()
            results, t0 = await open_loop(
                t.pool, raw, rate, duration, timeout=timeout or self.plan.timeout_s
            )
            await asyncio.sleep(0.3)  # deferred work: audit completions, counters
            cpu = t.server.cpu() - cpu0
        point = {
            "scenario": scenario,
            "target": t.name,
            "round": round_,
            "rate": rate,
            "duration_s": duration,
            **unary_summary(results, t0, rate),
            "cpu_s": cpu,
            "cpu_us_per_request": cpu / len(results) * 1e6,
            "loadavg_1m": os.getloadavg()[0],
        }
        self.points.append(point)
        await self.quiesce(t)
        return point

    async def sweep(self) -> dict[str, dict[str, Any]]:
        """Non-streaming requests at rising fixed rates until each gateway fails the test."""
        plan = self.plan
        raw = {n: t.raw(chat_body()) for n, t in self.targets.items()}
        running = [n for n in self.targets if n in SWEEP and n != DIRECT]
        best: dict[str, int | None] = dict.fromkeys(running)
        failed_at: dict[str, int] = {}
        for rate in plan.rates:
            # MindRouter and the floor run every rate up to the fixed one, whatever happened
            # below it, so that the figures at that rate exist; the floor stops there. Others
            # stop at their first failure: a gateway far past its capacity keeps working off the
            # backlog of a rate it could not sustain, long after the step.
            names = [n for n in best if n in running or (rate <= plan.fixed_rate and _keeps(n))]
            names = [n for n in names if n not in UP_TO_FIXED_RATE or rate <= plan.fixed_rate]
            if not names:
                break
            await self._sweep_rate(names, raw, rate)
            for name in names:
                if name not in running:
                    continue
                if figures.sustained_at(self.points, name, rate):
                    best[name] = rate
                else:
                    failed_at[name] = rate
                    running.remove(name)
            for name in UP_TO_FIXED_RATE:
                if name in running and rate >= plan.fixed_rate:
                    running.remove(name)
        for _ in range(plan.bisect):
            await self._bisect(best, failed_at, raw)
        return {
            n: {"max_sustained_rps": best[n], "first_failing_rps": failed_at.get(n)} for n in best
        }

    async def _sweep_rate(self, names: list[str], raw: dict[str, bytes], rate: int) -> None:
        for round_ in range(1, self.plan.rounds + 1):
            for name in [DIRECT, *names]:
                p = await self.unary_step(
                    self.targets[name], "sweep", raw[name], rate, self.plan.step_s, round_
                )
                _print_step(p)

    async def _bisect(
        self, best: dict[str, int | None], failed_at: dict[str, int], raw: dict[str, bytes]
    ) -> None:
        """One more point between the last rate that held and the first that did not; below
        the lowest rate when even that failed (a busy shared machine, or a slow peer)."""
        for name, fail in list(failed_at.items()):
            low = best[name] or 0
            mid = int(round((low + fail) / 2 / 5) * 5)
            if mid <= low or mid >= fail or mid < 5:
                continue
            await self._sweep_rate([name], raw, mid)
            if figures.sustained_at(self.points, name, mid):
                best[name] = mid
            else:
                failed_at[name] = mid

    async def fixed(
        self, scenario: str, bodies: Callable[[Target], bytes | None], rate: int, duration: float
    ) -> None:
        for t in self.active():
            raw = bodies(t)
            if raw is None:
                continue
            p = await self.unary_step(t, scenario, raw, rate, duration, 1, timeout=15.0)
            _print_step(p)

    async def disconnect(self) -> None:
        """Streams cancelled by the client after 5 chunks: how long until the backend sees it,
        and (MindRouter) whether the partial usage was charged and the slot given back."""
        n = self.plan.disconnect
        assert self.mock is not None
        for t in self.active():
            await post_once(HOST, self.mock.port, "/_reset", b"{}")
            before = await self._usage(t)
            prefix = t.name.replace("-", "")

            def body(i: int, t: Target = t, prefix: str = prefix) -> bytes:
                return t.raw(chat_body(stream=True, content=f"Count slowly. [tag:{prefix}{i}]"))

            with self.alone(t):
                results, _ = await open_loop(
                    t.pool, body, 25, n / 25, stream=True, cancel_after=5, timeout=15
                )
                await asyncio.sleep(2.0)
            stats = orjson.loads(await get(HOST, self.mock.port, "/_stats"))
            after = await self._usage(t)
            closed = stats["closed_early"]
            delays = []
            unseen = 0
            for i, r in enumerate(results):
                seen = closed.get(f"{prefix}{i}")
                if r.cancelled_at is None:
                    continue
                if seen is None:
                    unseen += 1
                else:
                    delays.append((seen - r.cancelled_at) * 1000)
            cancelled = sum(1 for r in results if r.cancelled_at is not None)
            point: dict[str, Any] = {
                "scenario": "disconnect",
                "target": t.name,
                "streams": len(results),
                "cancelled": cancelled,
                "backend_saw_close": len(delays),
                "backend_never_saw_close": unseen,
                "close_delay_p50_ms": percentile(delays, 50),
                "close_delay_p99_ms": percentile(delays, 99),
                "close_delay_max_ms": max(delays) if delays else float("nan"),
            }
            if before is not None and after is not None:
                charged = after["period_tokens"] - before["period_tokens"]
                point["tokens_charged_per_cancelled_stream"] = charged / max(1, cancelled)
                point["in_flight_after"] = after.get("in_flight")
                point["reserved_tokens_after"] = after.get("reserved_tokens")
            self.points.append(point)
            print(
                f"  disconnect {t.name:<20} cancelled {cancelled:>4} backend saw "
                f"{len(delays):>4} p50 {point['close_delay_p50_ms']:7.2f} ms "
                f"p99 {point['close_delay_p99_ms']:7.2f} ms"
                + (
                    f"  charged/stream {point['tokens_charged_per_cancelled_stream']:.1f}"
                    f" in_flight {point['in_flight_after']}"
                    if "in_flight_after" in point
                    else ""
                ),
                flush=True,
            )
            await self.quiesce(t)

    async def _usage(self, t: Target) -> dict[str, Any] | None:
        if not t.name.startswith("mindrouter"):
            return None
        try:
            data = orjson.loads(await get(HOST, t.port, "/v1/usage", t.headers))
        except Exception as exc:
            self.notes.append(f"{t.name}: /v1/usage failed: {exc}")
            return None
        return data if isinstance(data, dict) else None

    async def soak(self, sustained: dict[str, dict[str, Any]]) -> None:
        for t in self.targets.values():
            if t.name not in SOAK:
                continue
            best = sustained.get(t.name, {}).get("max_sustained_rps") or 100
            rate = max(25, min(400, best // 2))
            raw = t.raw(chat_body())
            start = len(t.rss_samples)
            t0 = time.monotonic()
            p = await self.unary_step(t, "soak", raw, rate, self.plan.soak_s, 1)
            samples = [(s - t0, m) for s, m in t.rss_samples[start:] if s - t0 >= 10]
            p["rss_slope_mib_per_min"] = _slope(samples) * 60 if len(samples) > 4 else None
            p["rss_start_mib"] = samples[0][1] if samples else None
            p["rss_end_mib"] = samples[-1][1] if samples else None
            _print_step(p)
            print(
                f"    RSS {p['rss_start_mib']} -> {p['rss_end_mib']} MiB, slope "
                f"{p['rss_slope_mib_per_min']} MiB/min",
                flush=True,
            )

    # -- the whole run ---------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        plan = self.plan
        load_start = os.getloadavg()
        await self.setup()
        sampler = asyncio.create_task(self.sample())
        try:
            print("PostgreSQL: single-row commits", flush=True)
            await scenarios.commit_probe(self, "start")
            print("mock: a unary answer against the same reply as a [whole] stream", flush=True)
            await scenarios.mock_parity(self)
            print("sweep: non-streaming, open loop, rising rates", flush=True)
            sustained = await self.sweep()
            print("streams: 64 chunks 10 ms apart, closed loop, rising concurrency", flush=True)
            await scenarios.stream_capacity(self)
            print("workers: one process against --workers 2, new connections", flush=True)
            await scenarios.workers(self)
            if plan.large_prompt:
                print("large prompt: ~100 KB, 10 tools, 20 RPS", flush=True)
                big = large_prompt_body()
                await self.fixed("large-prompt", lambda t: t.raw(big), 20, 10.0)
            if plan.anthropic:
                print("Anthropic format to the OpenAI-format mock, 100 RPS", flush=True)
                ant = anthropic_body()
                await self.fixed(
                    "anthropic",
                    lambda t: (
                        t.raw(chat_body())
                        if t.name == DIRECT
                        else t.raw(ant, t.anthropic_path)
                        if t.anthropic_path
                        else None
                    ),
                    100,
                    10.0,
                )
            if plan.disconnect:
                print(f"disconnect: {plan.disconnect} streams cancelled after 5 chunks", flush=True)
                await self.disconnect()
            if plan.soak_s:
                print(f"soak: {plan.soak_s:g} s at half the sustained rate", flush=True)
                await self.soak(sustained)
            await scenarios.commit_probe(self, "end")
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        load_end = os.getloadavg()
        return self.results(sustained, load_start, load_end)

    def results(
        self,
        sustained: dict[str, dict[str, Any]],
        load_start: tuple[float, float, float],
        load_end: tuple[float, float, float],
    ) -> dict[str, Any]:
        data: dict[str, Any] = {
            "meta": {
                "mode": "short" if self.plan.short else "full",
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
                "duration_s": round(time.time() - self.started, 1),
                "command": " ".join([".venv/bin/python", "-m", "bench.overhead", *sys.argv[1:]]),
                "cores": os.cpu_count(),
                "pinning": (
                    "gateways and the floor: taskset -c 1; the --workers 2 rows: taskset -c 0,1 "
                    "(both cores, so their workers share core 0 with the client and the mock); "
                    "load client and mock: core 0"
                ),
                "mock": (
                    "unary requests answered at once; the gateways' engine streams for them "
                    "(marker [whole]) answered at once with the same reply in 64 chunks, no "
                    "delay or gaps; client streams: 20 ms to the first chunk, 64 chunks 10 ms "
                    "apart"
                ),
                "loadavg_start": load_start,
                "loadavg_end": load_end,
                "loadavg_1m_max": max((v for _, v in self.load), default=load_end[0]),
                "loadavg_1m_samples": self.load,
                "python": platform.python_version(),
                "mindrouter_commit": _git_rev(),
                "litellm": targets.litellm_env.LITELLM,
                "plan": self.plan.__dict__,
                "skipped": self.skipped,
                "sweep_decisions": sustained,
                "notes": self.notes,
                "criteria": {
                    "min_achieved_ratio": figures.MIN_ACHIEVED,
                    "max_error_rate": figures.MAX_ERROR_RATE,
                    "max_added_p99_ms": figures.MAX_ADDED_P99_MS,
                },
            },
            "targets": {
                n: {
                    "port": t.port,
                    **t.server.info,
                    "idle": t.idle,
                    "rss_peak_mib": max((m for _, m in t.rss_samples), default=None),
                }
                for n, t in self.targets.items()
            },
            "points": self.points,
        }
        data["figures"] = figures.figures(data)
        return data

    def _point(self, scenario: str, name: str, **match: Any) -> dict[str, Any] | None:
        for p in self.points:
            if (
                p["scenario"] == scenario
                and p["target"] == name
                and all(p.get(k) == v for k, v in match.items())
            ):
                return p
        return None

    async def close(self, keep_logs: bool = False) -> None:
        for t in self.targets.values():
            t.pool.close()
        for server in reversed(self.servers):
            await server.stop()
        workdir = getattr(self, "workdir", None)
        if workdir is not None:
            if keep_logs:
                print(f"logs kept in {workdir}", flush=True)
            else:
                shutil.rmtree(workdir, ignore_errors=True)


def _keeps(name: str) -> bool:
    """Runs every sweep rate up to the fixed one even after failing below it."""
    return name.startswith("mindrouter") or name in UP_TO_FIXED_RATE


def _slope(samples: list[tuple[float, float]]) -> float:
    xs = [x for x, _ in samples]
    ys = [y for _, y in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in samples) / den if den else 0.0


def _git_rev() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=targets.REPO,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _print_step(p: dict[str, Any]) -> None:
    print(
        f"  {p['scenario']:<12} {p['target']:<20} r{p['round']} {p['rate']:>5} rps: "
        f"ok {p['ok']:>6}/{p['requests']:<6} achieved {p.get('achieved_ratio', 0):6.3f}  "
        f"p50 {p['p50_ms']:8.2f} p99 {p['p99_ms']:8.2f} ms  "
        f"cpu {p['cpu_us_per_request']:7.0f} µs/req  load {p['loadavg_1m']:.1f}",
        flush=True,
    )


def _clean(value: Any) -> Any:
    """NaN is not JSON: null instead."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write(data: dict[str, Any], stem: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(_clean(data), indent=1) + "\n")
    (RESULTS / f"{stem}.md").write_text(report.markdown(_clean(data)))
    print(f"wrote {RESULTS / stem}.json and .md", flush=True)


def rerender(path: Path) -> int:
    """Re-derives the figures and the report of a results file from its points."""
    data = json.loads(path.read_text())
    for name, f in data.get("figures", {}).items():
        peak = (f.get("memory") or {}).get("peak_mib")
        data["targets"].get(name, {}).setdefault("rss_peak_mib", peak)
    data["figures"] = figures.figures(data)
    write(data, path.stem)
    return 0


async def main(short: bool) -> int:
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setaffinity(0, {int(targets.CLIENT_CORE)})
    plan = Plan.quick() if short else Plan.full()
    bench = Bench(plan)
    ok = False
    try:
        data = await bench.run()
        ok = True
    finally:
        # The servers' logs are worth keeping only when something went wrong.
        await bench.close(keep_logs=not ok)
    print(report.markdown(_clean(data)))
    write(data, "overhead-short" if short else "overhead")
    return 0
