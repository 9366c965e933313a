"""What governance's store traffic alone costs a Python relay: the floor under the CPU ratio.

    .venv/bin/python -m bench.overhead.floor_stores [--rate 200] [--rounds 4] [--duration 12]

The overhead benchmark's floor relay (`bench.overhead.floor`: Starlette on uvicorn, uvloop,
httptools, a pooled aiohttp session) beside the same relay with the least store traffic that a
gateway which limits, audits and accounts every request must make, and beside the governed
gateway itself. The "stores relay" reads the model from the request body and the completion
tokens from the reply (orjson) and makes the store traffic of `bench.overhead.store_traffic`:
a Redis admission waited for, an audit row committed before relaying, then the settlement
written and the outcome gathered. `durable` and `fast` are the audit's two commit modes. No
authentication, no estimate, no scheduling, no failover, no translation, no streamed read of
the engine, no metrics or logs.

All targets run pinned like the main benchmark's gateways (core 1; client and mock on core 0),
against the machine's PostgreSQL (a fresh database each, dropped afterwards) and Redis (a key
prefix of their own, deleted afterwards). Rounds are interleaved and each has its own direct
measurement, so added latency is against the same moment. Nothing fails on a threshold; it
prints a Markdown table and writes bench/results/overhead-floor-stores.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.overhead import run, store_traffic
from bench.overhead.client import post
from bench.overhead.floor import BODY, measure, start_floor
from bench.overhead.output import RESULTS
from bench.overhead.targets import (
    CLIENT_CORE,
    GATEWAY_CORE,
    HOST,
    REPO,
    Server,
    Variant,
    _spawn,
    _wait_ready,
    start_mindrouter,
    start_mock,
    stop_all,
    workdir,
)
from bench.ports import free_port

APP = r"""
import os
from contextlib import asynccontextmanager

import aiohttp
import orjson
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

from bench.overhead.store_traffic import Stores

UPSTREAM = os.environ["FLOOR_UPSTREAM"]
stores = Stores()
session = None


@asynccontextmanager
async def lifespan(app):
    await stores.start()
    yield


async def health(request):
    return Response(b"ok")


async def relay(request):
    global session
    body = await request.body()
    model = orjson.loads(body)["model"]
    await stores.admit()
    record = await stores.begin(model)
    if session is None:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    async with session.post(UPSTREAM, data=body, headers={"content-type": "application/json"}) as r:
        data = await r.read()
    stores.end(record, orjson.loads(data)["usage"]["completion_tokens"])
    return Response(data, status_code=r.status, media_type="application/json")


app = Starlette(
    routes=[Route("/health", health), Route("/v1/chat/completions", relay, methods=["POST"])],
    lifespan=lifespan,
)
"""


async def start_stores_relay(mode: str, mock_port: int, work: Path) -> Server:
    """The stores relay (`durable` or `fast`) on the gateways' core, with its own database and
    Redis key prefix, both removed when the server stops."""
    store = await store_traffic.prepare(mode)
    app_dir = work / "stores-app"
    app_dir.mkdir(exist_ok=True)
    (app_dir / "stores_app.py").write_text(APP)
    name = f"stores-relay-{mode}"
    port = free_port()
    log = work / f"{name}.log"
    proc = _spawn(
        [sys.executable, "-m", "uvicorn", "stores_app:app", "--port", str(port), "--loop",
         "uvloop", "--http", "httptools", "--log-level", "warning", "--app-dir", str(app_dir)],
        log,
        GATEWAY_CORE,
        env={
            **store.env,
            "FLOOR_UPSTREAM": f"http://{HOST}:{mock_port}/v1/chat/completions",
            "PYTHONPATH": str(REPO),
        },
    )  # fmt: skip
    server = Server(name, port, proc, log, cleanup=[store.remove], info={"store": store})
    try:
        await _wait_ready(server, "/health", 60)
    except BaseException:
        await server.stop()
        raise
    return server


async def main(rate: float, rounds: int, duration: float, gateway: bool) -> str:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(CLIENT_CORE)})
    work = workdir()
    mock = await start_mock(work)
    servers: list[Server] = [mock]
    raws: dict[str, bytes] = {}
    try:
        floor = await start_floor(mock.port, work)
        servers.append(floor)
        raws[floor.name] = post(HOST, floor.port, "/v1/chat/completions", BODY, {})
        for mode in ("durable", "fast"):
            s = await start_stores_relay(mode, mock.port, work)
            servers.append(s)
            raws[s.name] = post(HOST, s.port, "/v1/chat/completions", BODY, {})
        if gateway:
            for mode in ("durable", "fast"):
                name = f"mindrouter-governed-{mode}"
                v = Variant(name, {"audit_commit": mode})
                gw = await start_mindrouter("governed", mock.port, work, variant=v)
                servers.append(gw)
                raws[name] = post(
                    HOST, gw.port, "/v1/chat/completions", run.chat_body(), gw.headers
                )
        direct_raw = post(HOST, mock.port, "/v1/chat/completions", BODY, {})
        names = list(raws)
        got: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        loads = []
        by_name = {s.name: s for s in servers}
        for round_ in range(1, rounds + 1):
            order = names if round_ % 2 else names[::-1]
            for n in order:
                direct = await measure(mock, direct_raw, rate, duration / 2)
                point = await measure(by_name[n], raws[n], rate, duration)
                point["added_p50"] = point["p50"] - direct["p50"]
                point["added_p99"] = point["p99"] - direct["p99"]
                got[n].append(point)
                loads.append(os.getloadavg()[0])
                print(
                    f"  r{round_} {n:<28} CPU {point['cpu_us']:7.0f} µs/req  added p50 "
                    f"{point['added_p50']:.2f} p99 {point['added_p99']:.2f} ms  errors "
                    f"{point['errors']}  load {loads[-1]:.2f}",
                    flush=True,
                )
        for s in servers:
            if "store" in s.info:
                s.info["rows"] = await s.info["store"].rows()
    finally:
        await stop_all(servers, work)
    return _report(got, rate, rounds, duration, loads, servers)


def _report(
    got: dict[str, list[dict[str, Any]]], rate: float, rounds: int, duration: float,
    loads: list[float], servers: list[Server],
) -> str:  # fmt: skip
    floor = statistics.median(p["cpu_us"] for p in got["floor"])
    rows = []
    for n, points in got.items():
        cpu = statistics.median(p["cpu_us"] for p in points)
        each = ", ".join(f"{p['cpu_us']:.0f}" for p in points)
        rows.append(
            f"| {n} | {cpu:.0f} ({each}) | {cpu / floor:.2f}× | "
            f"{statistics.median(p['added_p50'] for p in points):.2f} | "
            f"{statistics.median(p['added_p99'] for p in points):.2f} | "
            f"{sum(p['errors'] for p in points)} |"
        )
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return "\n".join(
        [
            "# The stores floor: a minimal relay with governance's store traffic",
            "",
            f"{stamp}; {rate:g} RPS open loop, {rounds} interleaved rounds of {duration:g} s; "
            f"load average {min(loads):.2f}-{max(loads):.2f}. Servers pinned to core 1, client "
            "and mock to core 0. Medians of the rounds (each round's CPU in brackets); added "
            "latency against a direct measurement just before each point. Produced by "
            "`python -m bench.overhead.floor_stores`.",
            "",
            "| server | CPU µs/req | ÷ floor | added p50 ms | added p99 ms | errors |",
            "|---|---:|---:|---:|---:|---:|",
            *rows,
            "",
            *(f"{s.name}: {s.info['rows']} (every request of the run, warm-ups included)."
              for s in servers if "rows" in s.info),
            "",
        ]
    )  # fmt: skip


def cli() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.overhead.floor_stores", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rate", type=float, default=200.0, help="RPS, open loop")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--duration", type=float, default=12.0, help="seconds per point")
    parser.add_argument("--no-gateway", action="store_true", help="leave the governed gateways out")
    ns = parser.parse_args()
    report = asyncio.run(main(ns.rate, ns.rounds, ns.duration, not ns.no_gateway))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "overhead-floor-stores.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
