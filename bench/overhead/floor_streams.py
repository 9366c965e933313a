"""What relaying a streamed chunk costs at the least on this machine: the floor under the
gateway's CPU per chunk.

    .venv/bin/python -m bench.overhead.floor_streams [--streams 128,256] [--duration 10]

Runs, pinned like the gateways of the main benchmark (relay on core 1, client and mock on core
0), a relay built from bare asyncio protocols (uvloop, httptools): each client request is sent to
the mock on a kept-alive connection (a pool, as the gateway keeps), and every body chunk the
mock sends is handled inside that connection's data callback and written to the client at
once, with no task or coroutine woken per chunk.
Three relays: `passthrough` writes the engine's bytes as they come; `decode` also splits them into
server-sent events, parses each event's JSON, counts its content and writes it re-encoded (what
a relay must do at the least to account for tokens and rename the stream); `stores` is `decode`
with the least store traffic a governed stream makes (`bench.overhead.store_traffic`: a Redis
admission and an audit row committed before the engine is called, the settlement and the
outcome at the end; audit `durable`, a fresh PostgreSQL database and Redis key prefix, removed
afterwards). No authentication, scheduling or failover; `passthrough` and `decode` make no
store traffic either. `--modes` picks them (default `passthrough,decode`); `gateway` adds the
governed gateway itself (PostgreSQL and Redis, audit `durable`), measured the same way. The
same streams as the main benchmark's streams sweep (64 chunks 10 ms apart after 20 ms), closed
loop, against the direct client → mock path.

Nothing fails on a threshold; it prints a Markdown table and writes
bench/results/overhead-floor-streams.md. Read the main benchmark's CPU per chunk against it:
what is above it is the gateway's own work per chunk, and the way that work is scheduled.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import httptools
import orjson
import uvloop

from bench.overhead import run, store_traffic, targets
from bench.overhead.bodies import chat_body
from bench.overhead.client import Pool, closed_loop, post
from bench.overhead.output import RESULTS
from bench.ports import free_port

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class _Engine(asyncio.Protocol):
    """A kept-alive connection to the mock, as a gateway pools its engine connections; the body
    of the request under way goes to `client` chunk by chunk, from the callback."""

    def __init__(self, client: _Client, decode: bool) -> None:
        self.client = client
        self.decode = decode
        self.parser = httptools.HttpResponseParser(self)
        self.rest = b""
        self.transport: asyncio.Transport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        if self.decode:
            body = self._reencode(body)
            if not body:
                return
        self.client.write_chunk(body)

    def _reencode(self, body: bytes) -> bytes:
        *events, self.rest = (self.rest + body).split(b"\n\n")
        out = []
        for event in events:
            if event.startswith(b"data: {"):
                chunk: dict[str, Any] = orjson.loads(event[6:])
                choices = chunk.get("choices") or []
                if choices and choices[0].get("delta", {}).get("content"):
                    self.client.tokens += 1
                renamed = {"id": self.client.request_id, "model": "renamed", "choices": choices}
                out.append(b"data: " + orjson.dumps(renamed) + b"\n\n")
            elif event:
                out.append(event + b"\n\n")
        return b"".join(out)

    def on_message_complete(self) -> None:
        self.rest = b""
        _IDLE.append(self)
        self.client.end()


_IDLE: list[_Engine] = []  # the pool of kept-alive connections to the mock


class _Client(asyncio.Protocol):
    """One client connection (keep-alive): each request is relayed to the mock."""

    engine_port = 0
    decode = False
    stores: store_traffic.Stores | None = None

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.body: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self.request_id = "chatcmpl-floor"
        self.tokens = 0
        self.record = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.body = []

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.body)
        asyncio.get_running_loop().create_task(self._open(body))

    async def _open(self, body: bytes) -> None:
        loop = asyncio.get_running_loop()
        if self.stores is not None:
            await self.stores.admit()
            self.record = await self.stores.begin(orjson.loads(body)["model"])
        if self.transport is None:
            return
        self.tokens = 0
        self.transport.write(HEAD)
        engine = None
        while _IDLE and engine is None:
            candidate = _IDLE.pop()
            if not candidate.lost:
                engine, candidate.client = candidate, self
        if engine is None:
            _, engine = await loop.create_connection(
                lambda: _Engine(self, self.decode), targets.HOST, self.engine_port
            )
        assert engine.transport is not None
        engine.transport.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: mock\r\ncontent-type: application/json"
            b"\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )

    def write_chunk(self, body: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"%x\r\n%s\r\n" % (len(body), body))

    def end(self) -> None:
        if self.stores is not None:
            self.stores.end(self.record, self.tokens)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"0\r\n\r\n")


async def serve(port: int, engine_port: int, decode: bool, stores: bool) -> None:
    _Client.engine_port, _Client.decode = engine_port, decode
    if stores:
        _Client.stores = store_traffic.Stores()
        await _Client.stores.start()
    server = await asyncio.get_running_loop().create_server(_Client, targets.HOST, port)
    await server.serve_forever()


async def _listening(port: int, timeout: float = 30.0) -> None:
    """Returns once the relay accepts connections (it answers no request of its own)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection(targets.HOST, port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)
            continue
        writer.close()
        await writer.wait_closed()
        return


async def _measure(
    port: int, streams: int, duration: float, relay: targets.Server | None = None
) -> dict[str, Any]:
    """The streams' figures, and the relay's CPU µs per chunk over the measured window (not
    the warm-up)."""
    pool = Pool(targets.HOST, port)
    headers = relay.headers if relay is not None else {}
    raw = post(targets.HOST, port, "/v1/chat/completions", chat_body(stream=True), headers)
    try:
        await closed_loop(pool, raw, streams, 2.0, stream=True, timeout=60)  # warm-up
        cpu0 = relay.cpu() if relay is not None else 0.0
        results, _ = await closed_loop(pool, raw, streams, duration, stream=True, timeout=60)
        cpu = relay.cpu() - cpu0 if relay is not None else None
    finally:
        pool.close()
    stats = run.stream_summary(results, run.STREAM_CHUNKS)
    stats["cpu_us_per_chunk"] = (
        None if cpu is None else cpu / max(stats["chunks_received"], 1) * 1e6
    )
    return stats


async def _gateway(streams: int, duration: float, mock_port: int, workdir: Path) -> dict[str, Any]:
    """The governed gateway (PostgreSQL and Redis, audit `durable`) started, measured at
    `streams` the same way as the relays, and stopped."""
    gw = await targets.start_mindrouter("governed", mock_port, workdir)
    try:
        return await _measure(gw.port, streams, duration, gw)
    finally:
        await gw.stop()


async def _relay(
    mode: str, streams: int, duration: float, mock_port: int, workdir: Path
) -> dict[str, Any]:
    """One relay of `mode` started, measured at `streams` and stopped; with `stores`, its
    database and keys are removed and the rows it wrote are in the figures."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.overhead.floor_streams", "--serve"]
    argv += [str(port), str(mock_port), *(["--decode"] if mode != "passthrough" else [])]
    env: dict[str, str | None] = {"PYTHONPATH": str(targets.REPO)}
    store = None
    if mode == "stores":
        argv.append("--stores")
        store = await store_traffic.prepare("durable")
        env.update(store.env)
    relay = targets.Server(mode, port, targets._spawn(argv, workdir / f"{mode}.log",
                           targets.GATEWAY_CORE, env), workdir / f"{mode}.log")  # fmt: skip
    try:
        await _listening(port)
        relay.refresh_pids()
        stats = await _measure(port, streams, duration, relay)
        if store is not None:
            stats["rows"] = await store.rows()
    finally:
        await relay.stop()
        if store is not None:
            await store.remove()
    return stats


async def main(levels: list[int], duration: float, modes: list[str]) -> int:
    os.sched_setaffinity(0, {int(targets.CLIENT_CORE)})
    workdir = targets.workdir()
    mock = await targets.start_mock(workdir)
    rows = []
    try:
        for streams in levels:
            rows.append(("direct", streams, await _measure(mock.port, streams, duration)))
            for mode in modes:
                if mode == "gateway":
                    stats = await _gateway(streams, duration, mock.port, workdir)
                else:
                    stats = await _relay(mode, streams, duration, mock.port, workdir)
                rows.append((mode, streams, stats))
                print(f"  {mode} {streams} streams: {stats['cpu_us_per_chunk']:.1f} µs per chunk")
    finally:
        await targets.stop_all([mock], workdir)
    lines = [
        "# The floor for streams: bare asyncio protocols relaying each chunk from its callback",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; `python -m "
        f"bench.overhead.floor_streams --streams {','.join(map(str, levels))} --duration "
        f"{duration:g} --modes {','.join(modes)}`; relay on core {targets.GATEWAY_CORE}, "
        f"client and mock on core {targets.CLIENT_CORE}; load average "
        f"{os.getloadavg()[0]:.2f}. Streams of 64 chunks 10 ms apart after 20 ms, closed "
        "loop; the relay keeps its connections to the mock alive.",
        "",
        "| target | streams | ok | TTFT p50 | TTFT p99 | gap p50 | gap p99 | CPU µs/chunk |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, streams, s in rows:
        per_chunk = s["cpu_us_per_chunk"]
        shown = "–" if per_chunk is None else f"{per_chunk:.1f}"
        lines.append(
            f"| {mode} | {streams} | {s['ok']}/{s['streams']} | {s['ttft_p50_ms']:.2f} | "
            f"{s['ttft_p99_ms']:.2f} | {s['gap_p50_ms']:.2f} | {s['gap_p99_ms']:.2f} | {shown} |"
        )
    lines += [""] + [
        f"`stores` at {streams} streams: {s['rows']} (warm-up included)."
        for mode, streams, s in rows
        if "rows" in s
    ]
    report = "\n".join(lines) + "\n"
    path = RESULTS / "overhead-floor-streams.md"
    path.write_text(report)
    print(report)
    print(f"wrote {path}")
    return 0


def cli() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead.floor_streams")
    parser.add_argument("--streams", default="128,256", help="concurrent streams, comma-separated")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measurement")
    parser.add_argument("--serve", nargs=2, type=int, metavar=("PORT", "ENGINE_PORT"))
    parser.add_argument(
        "--modes",
        default="passthrough,decode",
        help="relays: passthrough, decode, stores, gateway",
    )
    parser.add_argument("--decode", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stores", action="store_true", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.serve:
        uvloop.run(serve(ns.serve[0], ns.serve[1], ns.decode, ns.stores))
        return 0
    modes = ns.modes.split(",")
    if unknown := set(modes) - {"passthrough", "decode", "stores", "gateway"}:
        parser.error(f"unknown modes: {', '.join(sorted(unknown))}")
    return asyncio.run(main([int(x) for x in ns.streams.split(",")], ns.duration, modes))


if __name__ == "__main__":
    sys.exit(cli())
