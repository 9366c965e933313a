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
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.overhead import figures, floor, lifecycle, output, peer, report, scenarios, targets
from bench.overhead.bodies import WHOLE, anthropic_body, chat_body, large_prompt_body
from bench.overhead.client import Pool, closed_loop, open_loop, post, post_once
from bench.overhead.measure import (
    FIRST_TOKEN_MS,
    STREAM_CHUNKS,
    STREAM_GAP_MS,
    stream_summary,
    unary_summary,
)
from bench.overhead.output import RESULTS, clean, print_step, rerender, write
from bench.overhead.targets import GATEWAY_CORE, HOST, Server, Variant

# Re-exported for the profilers (bench/overhead/profile*.py).
__all__ = [
    "FIRST_TOKEN_MS",
    "RESULTS",
    "STREAM_CHUNKS",
    "STREAM_GAP_MS",
    "WHOLE",
    "Bench",
    "Plan",
    "Target",
    "chat_body",
    "rerender",
    "stream_summary",
    "unary_summary",
]

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


@dataclass(frozen=True)
class Plan:
    """How much of everything to run: the full benchmark or the short routine one."""

    short: bool
    rates: tuple[int, ...]
    step_s: float
    rounds: int
    stream_concurrency: tuple[int, ...]
    stream_s: float  # per streams step; longer where that would hold fewer than `stream_min`
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
    # Streams a step of the streams sweep measures at least (its TTFT p99 would otherwise be
    # its slowest stream or close to it: at one stream, 8 s hold 12); 0 = no minimum.
    stream_min: int = 100

    def stream_step_s(self, concurrency: int) -> float:
        """How long the streams step at `concurrency` runs."""
        one = (FIRST_TOKEN_MS + STREAM_CHUNKS * STREAM_GAP_MS) / 1000  # a stream, direct
        return max(self.stream_s, self.stream_min * one / concurrency)

    @staticmethod
    def full() -> Plan:
        return Plan(
            short=False,
            rates=(50, 100, 200, 300, 400, 500, 650, 800, 1000, 1250, 1500, 2000),
            step_s=10.0,
            rounds=2,
            stream_concurrency=(1, 4, 16, 32, 64, 128, 256),
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
            stream_concurrency=(1, 16, 32, 64),
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
            stream_min=0,
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


class Bench:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.targets: dict[str, Target] = {}
        self.points: list[dict[str, Any]] = []
        self.skipped: dict[str, str] = {}
        self.notes: list[str] = []
        self.load: list[tuple[float, float]] = []
        self.started = time.time()
        self.commit = output.git_rev()  # what the run starts from, not what HEAD is at its end
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
            starts[name] = peer.start_litellm(mock_port, workdir, workers, GATEWAY_CORES[workers])
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
                print_step(p)

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
            print_step(p)

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
                await lifecycle.disconnect(self)
            if plan.soak_s:
                print(f"soak: {plan.soak_s:g} s at half the sustained rate", flush=True)
                await lifecycle.soak(self, sustained, SOAK)
            await scenarios.commit_probe(self, "end")
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        load_end = os.getloadavg()
        return output.results(self, sustained, load_start, load_end)

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
    print(report.markdown(clean(data)))
    write(data, "overhead-short" if short else "overhead")
    return 0
