"""Where a relayed stream chunk's time goes: `python -m bench.overhead.profile --streams N`.

N concurrent OpenAI-dialect streamed chat requests (closed loop: each client opens its next
stream when the last one ends) through the gateway, the mock sending `--chunks` content chunks
`--gap-ms` apart after `--first-token-ms`. The main figure is the gateway's CPU per relayed chunk:
the CPU time of its process tree from /proc over the window, divided by the content chunks the
clients received (the streams' own costs — admission, audit, fair gate — are spread over their
chunks). CPU time holds up on a shared machine; the inter-chunk gaps do not, and are reported
for what they are worth, with the load average.

py-spy attributes samples to the stage of the innermost frame that belongs to one, so a chunk's
read from the engine counts as the read even though every layer of the relay is on its stack.

`--against REV` runs no profiler: it starts one gateway from the working tree (with `--variant`
applied) and one from the
source of git revision REV (exported to a temporary directory) and measures them in turn, round
after round (`--rounds`), so that a change's figure and the one before it share the machine's
weather. With `--arrivals R` the streams arrive open loop instead, R a second on a fixed
schedule (about R × the stream's length in flight at once), as independent users' do. Read tail
latencies from these too: in the closed loop every stream has the same length, so streams that
start together end together and start again together, and a change that ends streams a little
sooner can keep those bursts tighter and its TTFT tail longer, which no real population does.
`--spread S` starts the closed loop's clients evenly over S seconds instead of the 0.2 s the
full benchmark uses; over a whole stream's length (0.68 s for the mock's default) their
arrivals are as even as independent users'.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from bench.overhead import profile as prof
from bench.overhead import run, targets
from bench.overhead.client import Pool, Result, closed_loop, open_loop, post_once
from bench.overhead.targets import HOST
from bench.overhead.variants import launcher

# Innermost match wins: a frame's stage is the first entry whose keys it contains.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("audit writer: SQLAlchemy + asyncpg", ("AuditWriter", "asyncpg/", "sqlalchemy/")),
    ("limit store / Redis", ("redis/", "mindrouter/stores/")),
    (
        "engine read: HTTP client + SSE lines",
        ("aiohttp/", "httptools/", "mindrouter/backends/http", "mindrouter/backends/engine_stream"),
    ),
    ("engine decode: JSON + canonical events", ("mindrouter/backends/", "mindrouter/canonical/")),
    ("fair gate / scheduling", ("mindrouter/scheduling/",)),
    ("relay + accounting (pipeline)", ("mindrouter/pipeline/",)),
    ("Prometheus metrics", ("prometheus_client/",)),
    ("dialect encode", ("mindrouter/dialects/",)),
    ("logging (structlog)", ("structlog/",)),
    ("http glue (mindrouter/http)", ("mindrouter/http/",)),
    ("Starlette / anyio", ("starlette/", "anyio/", "fastapi/")),
    ("uvicorn: HTTP write", ("uvicorn/", "httptools/", "h11/")),
)


def stage_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, keys in STAGES:
            if any(k in frame for k in keys):
                return name
    return "event loop and the rest"


def stages(collapsed: Path) -> Counter[str]:
    out: Counter[str] = Counter()
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        parts = stack.split(";")
        frames = [prof._frame_key(f) for f in parts if " (" in f and not f.startswith("thread (")]
        if not frames or frames[-1] in prof.WAITING:
            continue
        out[stage_of(frames)] += int(count_text)
    return out


async def profile_streams(ns: argparse.Namespace) -> Path:
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setaffinity(0, {int(targets.CLIENT_CORE)})
    spy = None if ns.no_spy else prof.py_spy()
    workdir = targets.workdir()
    with prof.peers_on_load_core(workdir, ns.profile) as pin_peers:
        mock = await targets.start_mock(workdir)
        servers = [mock]
        shape = {"first_token_ms": ns.first_token_ms, "chunks": ns.chunks, "gap_ms": ns.gap_ms}
        await post_once(HOST, mock.port, "/_config", orjson.dumps(shape))
        out = run.RESULTS / f"overhead-profile-streams-{ns.profile}-{ns.variant}.txt"
        try:
            gw = await targets.start_mindrouter(
                ns.profile, mock.port, workdir, launcher(ns.variant)
            )
            servers.append(gw)
            pool = Pool(HOST, gw.port)
            raw = run.Target("gw", gw, gw.headers, pool).raw(run.chat_body(stream=True))
            await closed_loop(  # warm-up
                pool, raw, ns.streams, 3.0, stream=True, timeout=60, spread=ns.spread
            )
            await asyncio.sleep(1.0)
            pin_peers(gw)
            spy_proc = prof.start_spy(spy, gw.proc.pid, ns, out) if spy else None
            await asyncio.sleep(0.5)
            gw.refresh_pids()
            cpu0, split0 = gw.cpu(), targets.user_system(gw.pids)
            results, _ = await closed_loop(
                pool, raw, ns.streams, ns.duration - 1.5, stream=True, timeout=60, spread=ns.spread
            )
            cpu, split1 = gw.cpu() - cpu0, targets.user_system(gw.pids)
            load = os.getloadavg()[0]
            if spy_proc is not None:
                await prof.stop_spy(spy_proc)
            pool.close()
        finally:
            await targets.stop_all(servers, workdir)
    stats = run.stream_summary(results, ns.chunks)
    stats.update(cpu_s=cpu, loadavg_1m=load)
    stats["system_share"] = (split1[1] - split0[1]) / max(cpu, 1e-9)
    stats["cpu_us_per_chunk"] = cpu / max(1, stats["chunks_received"]) * 1e6
    report = _report(ns, stats, None if spy is None else out)
    path = out.with_suffix(".md")
    path.write_text(report)
    print(report)
    print(f"wrote {path}")
    return path


def _report(ns: argparse.Namespace, st: dict[str, Any], raw: Path | None) -> str:
    per_chunk = st["cpu_us_per_chunk"]
    lines = [
        f"# Stream profile: MindRouter {ns.profile}, variant {ns.variant}, {ns.streams} streams",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
        f"{st['loadavg_1m']:.2f}; mock: first token {ns.first_token_ms:g} ms, {ns.chunks} "
        f"chunks {ns.gap_ms:g} ms apart; closed loop for {ns.duration - 1.5:g} s.",
        "",
        f"**CPU {per_chunk:.1f} µs per relayed chunk** ({st['cpu_s']:.2f} s of gateway CPU, "
        f"{st['chunks_received']} content chunks received, {st['ok']}/{st['streams']} streams ok, "
        f"coalesced streams {st['coalesced_streams']}); {st['system_share']:.0%} of it in the "
        "kernel (system time)."
        + (f" Failed streams: {st['error_kinds']}." if st["errors"] else ""),
        "",
        f"Inter-chunk gap p50 {st['gap_p50_ms']:.2f} ms, p99 {st['gap_p99_ms']:.2f} ms, "
        f"max {st['gap_max_ms']:.2f} ms; TTFT p50 {st['ttft_p50_ms']:.2f} ms, "
        f"p99 {st['ttft_p99_ms']:.2f} ms.",
    ]
    if raw is None:
        return "\n".join(lines) + "\n"
    by_stage = stages(raw)
    s = prof.summarize(raw)
    total = sum(by_stage.values()) or 1
    lines += [
        "",
        f"py-spy at {ns.sample_rate} Hz, on-CPU samples only, {total} samples. Collapsed "
        f"stacks: `{raw.name}`.{prof.peers_line(ns.profile)}",
        "",
        "## By stage (innermost frame that belongs to one)",
        "",
        "| stage | share | µs per chunk |",
        "|---|---:|---:|",
        *(
            f"| {k} | {v / total:.1%} | {v / total * per_chunk:.1f} |"
            for k, v in by_stage.most_common()
        ),
        "",
        "## Top functions by self time",
        "",
        "| function | self | µs per chunk |",
        "|---|---:|---:|",
        *(
            f"| `{k}` | {v / total:.1%} | {v / total * per_chunk:.1f} |"
            for k, v in s["self"].most_common(ns.top)
        ),
        "",
        "## Top functions by cumulative time (on the stack)",
        "",
        "| function | cumulative | µs per chunk |",
        "|---|---:|---:|",
        *(
            f"| `{k}` | {v / total:.1%} | {v / total * per_chunk:.1f} |"
            for k, v in s["cumulative"].most_common(ns.top * 2)
        ),
    ]
    return "\n".join(lines) + "\n"


async def against(ns: argparse.Namespace) -> Path:
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setaffinity(0, {int(targets.CLIENT_CORE)})
    workdir = targets.workdir()
    old_src = Path(tempfile.mkdtemp(prefix="mrbench-src-"))
    mock = await targets.start_mock(workdir)
    servers = [mock]
    shape = {"first_token_ms": ns.first_token_ms, "chunks": ns.chunks, "gap_ms": ns.gap_ms}
    await post_once(HOST, mock.port, "/_config", orjson.dumps(shape))
    tree = "working tree" + ("" if ns.variant == "default" else f" + {ns.variant}")
    names = (ns.against, tree, run.DIRECT)
    rows: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    try:
        gws: dict[str, run.Target] = {}
        argvs = (targets.cli_with("", targets.source_at(ns.against, old_src)), launcher(ns.variant))
        for name, argv in zip(names[:2], argvs, strict=True):
            gw = await targets.start_mindrouter(ns.profile, mock.port, workdir, argv)
            servers.append(gw)
            gws[name] = run.Target(name, gw, gw.headers, Pool(HOST, gw.port))
        # The client straight to the mock: the gaps a gateway's are read against.
        gws[run.DIRECT] = run.Target(run.DIRECT, mock, {}, Pool(HOST, mock.port))
        raws = {n: t.raw(run.chat_body(stream=True)) for n, t in gws.items()}

        async def load(t: run.Target, raw: bytes, duration: float) -> list[Result]:
            if ns.arrivals:
                results, _ = await open_loop(
                    t.pool, raw, ns.arrivals, duration, stream=True, timeout=60
                )
            else:
                results, _ = await closed_loop(
                    t.pool, raw, ns.streams, duration, stream=True, timeout=60, spread=ns.spread
                )
            return results

        for n, t in gws.items():
            await load(t, raws[n], 3.0)
        for round_ in range(1, ns.rounds + 1):
            # The two gateways take turns at being measured first. Same source on both sides,
            # they still read a few per cent apart (docs/benchmarks.md, A/A runs).
            pair = list(names[:2]) if round_ % 2 else list(reversed(names[:2]))
            for n in (*pair, run.DIRECT):
                t = gws[n]
                await asyncio.sleep(1.0)
                t.server.refresh_pids()
                cpu0 = t.server.cpu()
                results = await load(t, raws[n], ns.duration)
                cpu = t.server.cpu() - cpu0 if t.server is not mock else math.nan
                row = run.stream_summary(results, ns.chunks)
                per_chunk = cpu / max(1, row["chunks_received"]) * 1e6
                row.update(cpu_us_per_chunk=per_chunk, load=os.getloadavg()[0])
                rows[n].append(row)
                print(
                    f"  r{round_} {n:<14} cpu {row['cpu_us_per_chunk']:6.1f} µs/chunk  "
                    f"gap p99 {row['gap_p99_ms']:7.2f} ms  load {row['load']:.2f}  "
                    f"ok {row['ok']}/{row['streams']} {row['error_kinds'] or ''}",
                    flush=True,
                )
        for t in gws.values():
            t.pool.close()
    finally:
        await targets.stop_all(servers, workdir, old_src)
    kind = f"open{ns.arrivals:g}" if ns.arrivals else str(ns.streams)
    path = run.RESULTS / f"overhead-streams-against-{ns.profile}-{kind}.md"
    path.write_text(_against_report(ns, names, rows))
    print(path.read_text())
    return path


def _against_report(
    ns: argparse.Namespace, names: tuple[str, ...], rows: dict[str, list[dict[str, Any]]]
) -> str:
    def med(n: str, key: str) -> float:
        return float(statistics.median(r[key] for r in rows[n]))

    loads = [r["load"] for n in names for r in rows[n]]
    load = (
        f"streams arriving open loop, {ns.arrivals:g} a second"
        if ns.arrivals
        else f"{ns.streams} streams, closed loop"
    )
    base = med(names[0], "cpu_us_per_chunk")
    lines = [
        f"# Streams, MindRouter {ns.profile}: {names[0]} against {names[1]}",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {load}, "
        f"{ns.rounds} rounds of {ns.duration:g} s each, interleaved; mock {ns.chunks} "
        f"chunks {ns.gap_ms:g} ms apart; load average {min(loads):.2f}–{max(loads):.2f}.",
        "",
        "| gateway | CPU µs/chunk (median) | vs first | per round | gap p50 ms | gap p99 ms | "
        "gap max ms | TTFT p99 ms | coalesced streams |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for n in names:
        cpu = med(n, "cpu_us_per_chunk")
        figures = (
            ("–", "–", "–")
            if math.isnan(cpu)
            else (
                f"{cpu:.1f}",
                f"{(cpu - base) / base:+.1%}",
                ", ".join(f"{r['cpu_us_per_chunk']:.1f}" for r in rows[n]),
            )
        )
        lines.append(
            f"| {n} | "
            + " | ".join(figures)
            + f" | {med(n, 'gap_p50_ms'):.2f} | {med(n, 'gap_p99_ms'):.2f} | "
            f"{med(n, 'gap_max_ms'):.2f} | {med(n, 'ttft_p99_ms'):.2f} | "
            f"{sum(r['coalesced_streams'] for r in rows[n])} |"
        )
    lines += [
        "",
        "Medians over the rounds; the direct row is the client straight to the mock (no CPU "
        "figure: the mock's is not a gateway's).",
    ]
    return "\n".join(lines) + "\n"
