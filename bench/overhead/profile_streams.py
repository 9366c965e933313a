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
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from bench.overhead import profile as prof
from bench.overhead import run, targets
from bench.overhead.client import Pool, closed_loop, post_once
from bench.overhead.targets import HOST
from bench.overhead.variants import launcher

# Innermost match wins: a frame's stage is the first entry whose keys it contains.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("audit writer: SQLAlchemy + asyncpg", ("AuditWriter", "asyncpg/", "sqlalchemy/")),
    ("limit store / Redis", ("redis/", "mindrouter/stores/")),
    ("engine read: aiohttp + SSE lines", ("aiohttp/", "mindrouter/backends/http")),
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
    mock = await targets.start_mock(workdir)
    servers = [mock]
    shape = {"first_token_ms": ns.first_token_ms, "chunks": ns.chunks, "gap_ms": ns.gap_ms}
    await post_once(HOST, mock.port, "/_config", orjson.dumps(shape))
    out = run.RESULTS / f"overhead-profile-streams-{ns.profile}-{ns.variant}.txt"
    try:
        gw = await targets.start_mindrouter(ns.profile, mock.port, workdir, launcher(ns.variant))
        servers.append(gw)
        pool = Pool(HOST, gw.port)
        raw = run.Target("gw", gw, gw.headers, pool).raw(run.chat_body(stream=True))
        await closed_loop(pool, raw, ns.streams, 3.0, stream=True, timeout=60)  # warm-up
        await asyncio.sleep(1.0)
        spy_proc = prof.start_spy(spy, gw.proc.pid, ns, out) if spy else None
        await asyncio.sleep(0.5)
        gw.refresh_pids()
        cpu0 = gw.cpu()
        results, _ = await closed_loop(
            pool, raw, ns.streams, ns.duration - 1.5, stream=True, timeout=60
        )
        cpu = gw.cpu() - cpu0
        load = os.getloadavg()[0]
        if spy_proc is not None:
            await prof.stop_spy(spy_proc)
        pool.close()
    finally:
        for server in reversed(servers):
            await server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    stats = run.stream_summary(results, ns.chunks)
    chunks = sum(len(r.events) for r in results if r.ok)
    stats.update(chunks=chunks, cpu_s=cpu, loadavg_1m=load)
    stats["cpu_us_per_chunk"] = cpu / max(1, chunks) * 1e6
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
        f"{st['chunks']} content chunks received, {st['ok']}/{st['streams']} streams ok, "
        f"coalesced streams {st['coalesced_streams']}).",
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
        f"stacks: `{raw.name}`.",
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
