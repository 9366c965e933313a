"""What any Python gateway costs on this machine: the floor under the overhead figures.

    .venv/bin/python -m bench.overhead.floor [--rates 100,200] [--duration 10]

Runs, pinned like the gateways of the main benchmark (server on core 1, client and mock on core
0), the least a Python HTTP proxy can do with the project's own stack: a Starlette app on uvicorn
(uvloop, httptools) that reads the request and returns a fixed 1 KB reply ("hello"), and one that
relays the request to the mock through a pooled aiohttp session and returns its reply
("relay": no authentication, no limits, no audit, no scheduling, no translation). Each rate is
measured against the direct client → mock path in the same way as `python -m bench.overhead`:
open loop, latency from the intended send time, CPU from /proc.

Nothing fails on a threshold; it prints a Markdown table and writes
bench/results/overhead-floor.md. Read the main benchmark's added latency and CPU per request
against the relay's: what is left is what the gateway's own work costs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.overhead.client import Pool, open_loop, percentile, post
from bench.overhead.output import RESULTS
from bench.overhead.targets import (
    GATEWAY_CORE,
    HOST,
    MODEL,
    Server,
    _spawn,
    _wait_ready,
    start_mock,
)
from bench.ports import free_port

APP = """
import os
import aiohttp
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

REPLY = b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":' + (
    b'{"role":"assistant","content":"' + b"hello " * 150 + b'"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":10,"completion_tokens":150,"total_tokens":160}}'
)
UPSTREAM = os.environ["FLOOR_UPSTREAM"]
session = None


async def health(request):
    return Response(b"ok")


async def hello(request):
    await request.body()
    return Response(REPLY, media_type="application/json")


async def relay(request):
    global session
    body = await request.body()
    if session is None:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    async with session.post(UPSTREAM, data=body, headers={"content-type": "application/json"}) as r:
        data = await r.read()
    return Response(data, status_code=r.status, media_type="application/json")


app = Starlette(routes=[
    Route("/health", health),
    Route("/hello", hello, methods=["POST"]),
    Route("/v1/chat/completions", relay, methods=["POST"]),
])
"""

BODY = (
    b'{"model":"' + MODEL.encode() + b'","messages":[{"role":"user","content":"Hello there"}],'
    b'"max_tokens":64}'
)


async def measure(server: Server, raw: bytes, rate: float, duration: float) -> dict[str, float]:
    """`raw` (a whole request) sent to `server` open loop at `rate` for `duration` seconds,
    after a second's warm-up: latency percentiles from the intended send times, errors, and
    the server's CPU µs per successful request."""
    pool = Pool(HOST, server.port)
    try:
        await open_loop(pool, raw, min(rate, 50), 1.0)  # warm up the connections
        await asyncio.sleep(0.3)
        server.refresh_pids()
        cpu0 = server.cpu()
        results, _ = await open_loop(pool, raw, rate, duration)
        await asyncio.sleep(0.3)  # the last requests' CPU
        cpu = server.cpu() - cpu0
    finally:
        pool.close()
    ok = [r for r in results if r.ok]
    if not ok:
        raise RuntimeError(f"every request to {server.name} failed; see {server.log}")
    lat = [r.latency * 1000 for r in ok]
    return {
        "p50": percentile(lat, 50),
        "p99": percentile(lat, 99),
        "errors": len(results) - len(ok),
        "cpu_us": cpu / len(ok) * 1e6,
    }


def _raw(server: Server, path: str) -> bytes:
    return post(HOST, server.port, path, BODY, {})


async def start_floor(mock_port: int, work: Path) -> Server:
    """The Starlette + aiohttp relay (and "hello" app) on the gateways' core, relaying to the
    mock at `mock_port`; also a target of `python -m bench.overhead`."""
    app_dir = work / "floor-app"
    app_dir.mkdir(exist_ok=True)
    (app_dir / "floor_app.py").write_text(APP)
    port = free_port()
    proc = _spawn(
        [sys.executable, "-m", "uvicorn", "floor_app:app", "--port", str(port), "--loop",
         "uvloop", "--http", "httptools", "--log-level", "warning", "--app-dir", str(app_dir)],
        work / "floor.log",
        GATEWAY_CORE,
        env={"FLOOR_UPSTREAM": f"http://{HOST}:{mock_port}/v1/chat/completions"},
    )  # fmt: skip
    floor = Server("floor", port, proc, work / "floor.log", info={"app": "Starlette + aiohttp"})
    try:
        await _wait_ready(floor, "/health", 60)
    except BaseException:
        await floor.stop()
        raise
    return floor


async def main(rates: list[float], duration: float) -> str:
    work = Path(tempfile.mkdtemp(prefix="mrfloor-"))
    mock = await start_mock(work)
    try:
        floor = await start_floor(mock.port, work)
    except BaseException:
        await mock.stop()
        raise
    rows = []
    try:
        for rate in rates:
            direct = await measure(mock, _raw(mock, "/v1/chat/completions"), rate, duration)
            for name, path in (("hello", "/hello"), ("relay", "/v1/chat/completions")):
                got = await measure(floor, _raw(floor, path), rate, duration)
                rows.append(
                    f"| {rate:g} | {name} | {got['p50']:.2f} | {got['p99']:.2f} | "
                    f"{got['p50'] - direct['p50']:.2f} | {got['p99'] - direct['p99']:.2f} | "
                    f"{got['cpu_us']:.0f} | {got['errors']:g} |"
                )
            rows.append(
                f"| {rate:g} | direct (mock) | {direct['p50']:.2f} | {direct['p99']:.2f} | – | – "
                f"| {direct['cpu_us']:.0f} (mock) | {direct['errors']:g} |"
            )
    finally:
        await floor.stop()
        await mock.stop()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return "\n".join(
        [
            "# The floor: a minimal Starlette + aiohttp relay on this machine",
            "",
            f"{stamp}; {duration:g} s per point; load average {os.getloadavg()[0]:.2f}. "
            "Server pinned to core 1, client and mock to core 0. Produced by "
            "`python -m bench.overhead.floor`.",
            "",
            "| RPS | server | p50 ms | p99 ms | added p50 | added p99 | CPU µs/req | errors |",
            "|---:|---|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
        ]
    )


def cli() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead.floor", description=__doc__)
    parser.add_argument("--rates", default="100,200", help="comma-separated RPS")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per point")
    ns = parser.parse_args()
    report = asyncio.run(main([float(r) for r in ns.rates.split(",")], ns.duration))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "overhead-floor.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
