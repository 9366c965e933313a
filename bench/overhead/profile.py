"""Where the gateway's time goes under load: py-spy samples of a gateway at a fixed open-loop rate.

    .venv/bin/python -m bench.overhead.profile [--profile governed|bare] [--rate 150]
        [--duration 30] [--variant default|uvloop|...]
    .venv/bin/python -m bench.overhead.profile --streams 32 [--chunks 64 --gap-ms 10]
    .venv/bin/python -m bench.overhead.profile --streams 128 --against REV [--arrivals 190]

py-spy is installed into a throwaway virtual environment outside the repository
(~/.cache/mindrouter/tools-venv) the first time. It samples the running gateway without pausing
it (`--nonblocking`) and only while a thread is on the CPU (idle threads are not sampled), so the
shares below are shares of the gateway's CPU time. The collapsed stacks are kept next to the
report, for a flame graph (`flamegraph.pl` or speedscope) or a closer look.

`--variant` profiles the gateway with one candidate change applied from outside the source tree
(bench/overhead/variants.py). `--compare a,b,...` runs no profiler: it starts one gateway per
variant and measures them interleaved at the same rate (CPU per request from /proc, latency),
round after round, to put a number on each recommendation before anyone makes it.

`--streams N` profiles the relay of streamed chunks instead (bench/overhead/profile_streams.py):
N concurrent streams, closed loop, and the gateway's CPU per relayed chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.harness import OwnRedis
from bench.overhead import run, targets
from bench.overhead.client import Pool, open_loop
from bench.overhead.targets import HOST
from bench.overhead.variants import VARIANTS, launcher

TOOLS = Path.home() / ".cache" / "mindrouter" / "tools-venv"


def py_spy() -> Path:
    exe = TOOLS / "bin" / "py-spy"
    if not exe.exists():
        base = Path(sys.base_prefix) / "bin" / "python3"
        subprocess.run([str(base), "-m", "venv", str(TOOLS)], check=True)
        subprocess.run([str(TOOLS / "bin" / "pip"), "install", "--quiet", "py-spy"], check=True)
    return exe


def start_spy(spy: Path, pid: int, ns: argparse.Namespace, out: Path) -> subprocess.Popen[bytes]:
    """py-spy recording `pid` for `ns.duration` seconds into `out` (collapsed stacks)."""
    return subprocess.Popen(
        [
            str(spy),
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(ns.sample_rate),
            "--duration",
            str(int(ns.duration)),
            "--format",
            "raw",
            # Native stacks need the process paused while it is sampled.
            *(["--native"] if ns.native else ["--nonblocking"]),
            "--threads",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def stop_spy(proc: subprocess.Popen[bytes]) -> None:
    _, err = await asyncio.to_thread(proc.communicate)
    if proc.returncode != 0:
        raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')[-2000:]}")


def _frame_key(frame: str) -> str:
    """`function (path/to/file.py:123)` -> `function (file path, without the line)`."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/src/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})"


# A thread parked in epoll_wait is not working; py-spy still samples it when the kernel reports it
# runnable (it has just been woken, or waits for the CPU on a busy machine).
WAITING = frozenset({"EpollSelector.select (selectors.py)", "select (selectors.py)"})


def summarize(collapsed: Path) -> dict[str, Any]:
    self_time: Counter[str] = Counter()
    cumulative: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    stages: Counter[str] = Counter()
    total = waiting = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        parts = stack.split(";")
        frames = [_frame_key(f) for f in parts if " (" in f and not f.startswith("thread (")]
        if not frames:
            continue
        # aiosqlite's worker thread blocks on its queue at this line between statements.
        if frames[-1] in WAITING or parts[-1].endswith("aiosqlite/core.py:59)"):
            waiting += count
            continue
        total += count
        threads[_thread_kind(frames)] += count
        stages[_stage(frames)] += count
        self_time[frames[-1]] += count
        for key in set(frames):
            cumulative[key] += count
        leaf_path = frames[-1].rsplit(" (", 1)[1].rstrip(")")
        modules[_package(leaf_path)] += count
    return {
        "samples": total,
        "waiting": waiting,
        "self": self_time,
        "cumulative": cumulative,
        "modules": modules,
        "threads": threads,
        "stages": stages,
    }


# The first matching stage claims a sample: a stack that is inside the audit writer counts there
# even when its leaf is asyncio's transport code.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "audit writer: SQLAlchemy + asyncpg/aiosqlite",
        ("AuditWriter", "asyncpg/", "sqlalchemy/", "aiosqlite/"),
    ),
    ("limit store: redis-py or in-memory", ("redis/", "mindrouter/stores/limits")),
    ("upstream call: HTTP client + adapter", ("aiohttp/", "httptools/", "mindrouter/backends/")),
    ("authentication", ("mindrouter/identity/",)),
    ("fair gate / scheduling", ("mindrouter/scheduling/",)),
    ("Prometheus metrics", ("prometheus_client/",)),
    ("dialect decode/encode", ("mindrouter/dialects/",)),
    ("token estimate (tiktoken)", ("tiktoken/", "mindrouter/tokens")),
    ("logging (structlog)", ("structlog/",)),
    ("pipeline glue (gateway, flight, http)", ("mindrouter/pipeline/", "mindrouter/http/")),
    ("web framework (uvicorn, starlette, fastapi)", ("uvicorn/", "starlette/", "fastapi/")),
)


def _stage(frames: list[str]) -> str:
    for name, keys in STAGES:
        if any(k in f for f in frames for k in keys):
            return name
    return "event loop and the rest"


def _thread_kind(frames: list[str]) -> str:
    if any("aiosqlite" in f for f in frames):
        return "aiosqlite worker thread"
    if any(f.startswith("_worker (concurrent") for f in frames):
        return "executor thread (to_thread)"
    return "event loop thread"


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of each thread of `pid`, keyed by `name/tid`."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        out[f"{name}/{tid}"] = (int(fields[11]) + int(fields[12])) / targets.CLK_TCK
    return out


def _package(path: str) -> str:
    parts = path.split("/")
    if parts[0] == "mindrouter" and len(parts) > 1:
        return "/".join(parts[:2]).removesuffix(".py")
    return parts[0].removesuffix(".py")


async def profile(ns: argparse.Namespace) -> Path:
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setaffinity(0, {int(targets.CLIENT_CORE)})
    spy = py_spy()
    workdir = targets.workdir()
    with peers_on_load_core(workdir, ns.profile) as pin_peers:
        mock = await targets.start_mock(workdir)
        servers = [mock]
        try:
            gw = await targets.start_mindrouter(
                ns.profile, mock.port, workdir, launcher=launcher(ns.variant)
            )
            servers.append(gw)
            pool = Pool(HOST, gw.port)
            raw = run.Target("gw", gw, gw.headers, pool).raw(run.chat_body())
            await open_loop(pool, raw, 100, 3.0, timeout=30)  # warm-up
            await asyncio.sleep(1.0)
            pin_peers(gw)
            out = run.RESULTS / f"overhead-profile-{ns.profile}-{ns.variant}.txt"
            spy_proc = start_spy(spy, gw.proc.pid, ns, out)
            await asyncio.sleep(0.5)
            gw.refresh_pids()
            cpu0 = gw.cpu()
            threads0 = thread_cpu(gw.proc.pid)
            results, t0 = await open_loop(pool, raw, ns.rate, ns.duration - 1.0, timeout=10)
            cpu = gw.cpu() - cpu0
            threads1 = thread_cpu(gw.proc.pid)
            await stop_spy(spy_proc)
            pool.close()
        finally:
            await targets.stop_all(servers, workdir)
    stats = run.unary_summary(results, t0, ns.rate)
    stats["cpu_us_per_request"] = cpu / len(results) * 1e6
    stats["threads_us_per_request"] = {
        name: (t - threads0.get(name, 0.0)) / len(results) * 1e6
        for name, t in sorted(threads1.items(), key=lambda kv: -kv[1] + threads0.get(kv[0], 0))
        if t - threads0.get(name, 0.0) > 0
    }
    report = _report(ns, stats, summarize(out), out)
    path = run.RESULTS / f"overhead-profile-{ns.profile}-{ns.variant}.md"
    path.write_text(report)
    print(report)
    print(f"wrote {path}")
    return path


@contextlib.contextmanager
def peers_on_load_core(workdir: Path, profile: str) -> Iterator[Callable[[targets.Server], None]]:
    """For profiles of the governed gateway (for the bare one, nothing): the gateways started
    inside use a Redis of their own, run on the load core, and the function yielded moves a
    gateway's PostgreSQL backends there too (call it once the gateway has opened its
    connections, before sampling), as if both were on machines of their own.

    Left where the kernel puts them, a Redis or PostgreSQL process woken by the gateway's write
    mostly runs on the gateway's own core (2 preemptions of the gateway per request at 200 RPS),
    and py-spy counts the time it runs there as the gateway's, inside the write: measured at
    200 RPS, `_Connection.flush` 6.8 % of the samples instead of 1-2 %, asyncpg's execute 8.7 %
    instead of 3-4 %. The gateway's own CPU per request (from /proc) is the same either way, and
    its latency a little better unpinned (p50 2.68 against 2.77 ms), so the full run leaves them
    to the kernel."""
    if profile != "governed":
        yield lambda _: None  # SQLite in the gateway's own process, no Redis
        return
    own = OwnRedis(workdir / "redis").start()
    assert own.pid is not None
    load_core = {int(targets.CLIENT_CORE)}
    with contextlib.suppress(OSError):
        os.sched_setaffinity(own.pid, load_core)

    def pin(server: targets.Server) -> None:
        for pid in targets.database_backends(server.info["database_name"]):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(pid, load_core)

    shared, targets.REDIS_URL = targets.REDIS_URL, own.url
    try:
        yield pin
    finally:
        targets.REDIS_URL = shared
        own.stop()


def peers_line(profile: str) -> str:
    if profile != "governed":
        return ""
    return (
        " Redis (one of the profile's own) and the database's PostgreSQL backends run on the load"
        " core, so that their work is not sampled as the gateway's (`profile.peers_on_load_core`)."
    )


def _report(ns: argparse.Namespace, stats: dict[str, Any], s: dict[str, Any], raw: Path) -> str:
    total = s["samples"] or 1
    lines = [
        f"# Profile: MindRouter {ns.profile}, variant {ns.variant}, {ns.rate} RPS open loop",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
        f"{os.getloadavg()[0]:.2f}; py-spy at {ns.sample_rate} Hz, on-CPU samples only, "
        f"{s['samples']} samples. Collapsed stacks: `{raw.name}`.{peers_line(ns.profile)}",
        "",
        f"Requests {stats['requests']}, errors {stats['errors']}, p50 {stats['p50_ms']:.2f} ms, "
        f"p99 {stats['p99_ms']:.2f} ms (from intended send time, mock ~0 ms), "
        f"CPU {stats['cpu_us_per_request']:.0f} µs per request.",
        "",
        "CPU per thread (from /proc, µs per request): "
        + ", ".join(f"{k} {v:.0f}" for k, v in stats["threads_us_per_request"].items())
        + ".",
        "",
        f"Samples parked in epoll (not counted below): {s['waiting']}. Samples by thread kind: "
        + ", ".join(f"{k} {v / total:.1%}" for k, v in s["threads"].most_common())
        + ".",
        "",
        "## By stage (first match on the stack)",
        "",
        "| stage | share | µs per request |",
        "|---|---:|---:|",
        *(
            f"| {k} | {v / total:.1%} | {v / total * stats['cpu_us_per_request']:.0f} |"
            for k, v in s["stages"].most_common()
        ),
        "",
        "## By package (leaf frame)",
        "",
        "| package | share |",
        "|---|---:|",
    ]
    lines += [f"| {k} | {v / total:.1%} |" for k, v in s["modules"].most_common(25)]
    lines += ["", "## Top functions by self time", "", "| function | self |", "|---|---:|"]
    lines += [f"| `{k}` | {v / total:.1%} |" for k, v in s["self"].most_common(ns.top)]
    lines += [
        "",
        "## Top functions by cumulative time (on the stack)",
        "",
        "| function | cumulative | µs per request |",
        "|---|---:|---:|",
    ]
    per_request = stats["cpu_us_per_request"]
    lines += [
        f"| `{k}` | {v / total:.1%} | {v / total * per_request:.0f} |"
        for k, v in s["cumulative"].most_common(ns.top * 2)
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead.profile", description=__doc__)
    parser.add_argument("--profile", choices=("bare", "governed"), default="governed")
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="default")
    parser.add_argument("--rate", type=int, default=150)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--sample-rate", type=int, default=250)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--native", action="store_true", help="py-spy --native: C frames too")
    parser.add_argument("--compare", help="comma-separated variants to measure side by side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=0, help="N concurrent streams instead")
    parser.add_argument("--chunks", type=int, default=run.STREAM_CHUNKS)
    parser.add_argument("--gap-ms", type=float, default=run.STREAM_GAP_MS)
    parser.add_argument("--first-token-ms", type=float, default=run.FIRST_TOKEN_MS)
    parser.add_argument("--no-spy", action="store_true", help="streams: /proc CPU only")
    parser.add_argument("--against", help="streams: git revision to measure the tree against")
    parser.add_argument(
        "--arrivals", type=float, default=0.0, help="with --against: streams a second, open loop"
    )
    parser.add_argument(
        "--spread",
        type=float,
        help="streams: the closed loop's first streams start evenly over this many seconds "
        "(default 0.2, as in the full benchmark)",
    )
    ns = parser.parse_args()
    if ns.streams:
        from bench.overhead.profile_streams import against, profile_streams

        job = against(ns) if ns.against else profile_streams(ns)
    else:
        from bench.overhead.profile_compare import compare

        job = compare(ns) if ns.compare else profile(ns)
    try:
        import uvloop

        uvloop.run(job)
    except ImportError:
        asyncio.run(job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
