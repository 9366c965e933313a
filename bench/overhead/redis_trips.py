"""What a governed gateway asks Redis per request, and what its governance costs in CPU.

    .venv/bin/python -m bench.overhead.redis_trips trips [--requests 200] [--rev REV] [--monitor]
    .venv/bin/python -m bench.overhead.redis_trips cpu --against REV [--rounds 6]

Both start a redis-server of their own (a free port, nothing saved) and a fresh PostgreSQL
database per gateway, in front of the overhead benchmark's mock, in the governed profile
(`targets.mindrouter_config`).

`trips` sends requests one at a time (non-streamed, then streamed) and reports, per request:
the commands Redis ran (`INFO commandstats` deltas) and the round trips the gateway made,
counted inside the gateway by the call site that sent them (redis-py's `send_packed_command`,
once per command or pipeline), with the round trips of an idle spell of the same length
subtracted, so what is left is what the requests cost. `--monitor` prints the MONITOR lines of
a few requests.

`cpu` starts two gateways, one from the working tree and one from the source of `--against`,
and measures them interleaved, round after round: non-streamed requests at an open-loop rate,
then closed loop, then closed-loop streams; the gateway's CPU (from /proc) per request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import orjson
import redis

from bench.harness import OwnRedis
from bench.overhead import run, targets
from bench.overhead.client import Pool, Result, closed_loop, open_loop, post_once
from bench.overhead.targets import HOST

# Run in the gateway before `mindrouter.cli.main`: counts every round trip to Redis by the
# innermost mindrouter function that caused it, written as JSON to $MR_TRIPS on SIGUSR2.
_COUNTER = """
import json as _j, os as _o, signal as _s, sys as _y, collections as _c
import redis.asyncio.connection as _rc
_counts = _c.Counter()
_send = _rc.AbstractConnection.send_packed_command
_SKIP = ('stores/redis_pipe.py', 'stores/limits/redis_store.py:_await',
         'stores/limits/redis_store.py:run', 'stores/limits/redis_store.py:call',
         'stores/limits/redis_store.py:send')
def _site(depth):
    f = _y._getframe(depth)
    while f is not None:
        name = f.f_code.co_filename
        if '/mindrouter/' in name and '/redis/' not in name:
            site = name.rsplit('/mindrouter/', 1)[1] + ':' + f.f_code.co_name
            if not site.startswith(_SKIP):
                return site
        f = f.f_back
    return '?'
async def _counted(self, command, check_health=True):
    _counts[_site(2) + ' (redis-py, awaited)'] += 1
    return await _send(self, command, check_health)
_rc.AbstractConnection.send_packed_command = _counted
try:
    import mindrouter.stores.redis_pipe as _rp
except ImportError:
    _rp = None
if _rp is not None:
    _issue = _rp.PipedRedis._issue
    def _piped(self, packed, *, now):
        awaited = _y._getframe(1).f_code.co_name == 'call'
        how = 'awaited' if awaited else 'sent, reply not awaited'
        _counts[_site(1) + f' (pipelined, {how})'] += 1
        return _issue(self, packed, now=now)
    _rp.PipedRedis._issue = _piped
def _dump(*_):
    with open(_o.environ['MR_TRIPS'], 'w') as f:
        _j.dump(dict(_counts), f)
_s.signal(_s.SIGUSR2, _dump)
"""


def _commandstats(url: str) -> Counter[str]:
    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})


async def _trips(gw: targets.Server, trips_file: Path) -> Counter[str]:
    gw.proc.send_signal(signal.SIGUSR2)
    for _ in range(50):
        await asyncio.sleep(0.1)
        if trips_file.exists() and trips_file.stat().st_size:
            counts = Counter(json.loads(trips_file.read_text()))
            trips_file.unlink()
            return counts
    raise RuntimeError("the gateway did not write its round-trip counts")


async def _sequential(pool: Pool, raw: bytes, n: int, *, stream: bool) -> int:
    ok = 0
    for _ in range(n):
        r = Result(due=time.monotonic())
        await pool.send(raw, r, stream=stream, timeout=30)
        ok += r.ok
    return ok


async def _measure(
    gw: targets.Server, own: OwnRedis, trips_file: Path, pool: Pool, raw: bytes | None, n: int
) -> tuple[Counter[str], Counter[str], float]:
    """Commands and round trips of `n` requests of `raw` (None: an idle spell as long)."""
    cmd0, trips0 = _commandstats(own.url), await _trips(gw, trips_file)
    t0 = time.monotonic()
    if raw is None:
        await asyncio.sleep(n)
    else:
        stream = b'"stream":true' in raw
        ok = await _sequential(pool, raw, n, stream=stream)
        if ok != n:
            raise RuntimeError(f"{n - ok} of {n} requests failed")
    elapsed = time.monotonic() - t0
    await asyncio.sleep(0.3)  # clean-ups and the exchanges they poke
    cmds = _commandstats(own.url) - cmd0
    trips = await _trips(gw, trips_file) - trips0
    return cmds, trips, elapsed + 0.3


def _per_request(
    counts: Counter[str], idle: Counter[str], idle_s: float, busy_s: float, n: int
) -> dict[str, float]:
    out = {}
    for k in set(counts) | set(idle):
        v = (counts[k] - idle[k] * busy_s / idle_s) / n if idle_s else counts[k] / n
        if abs(v) >= 0.005:
            out[k] = round(v, 3)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


async def trips(ns: argparse.Namespace) -> None:
    workdir = targets.workdir()
    own = OwnRedis(workdir / "redis").start()
    targets.REDIS_URL = own.url  # the governed profile's Redis: this one
    trips_file = workdir / "trips.json"
    os.environ["MR_TRIPS"] = str(trips_file)
    mock = await targets.start_mock(workdir)
    shape = {"first_token_ms": 0, "chunks": 16, "gap_ms": 0}
    await post_once(HOST, mock.port, "/_config", orjson.dumps(shape))
    src = None
    if ns.rev:
        (workdir / "src-at-rev").mkdir()
        src = targets.source_at(ns.rev, workdir / "src-at-rev")
    argv = targets.cli_with(_COUNTER, src)
    gw = await targets.start_mindrouter("governed", mock.port, workdir, argv)
    try:
        target = run.Target("gw", gw, gw.headers, Pool(HOST, gw.port))
        kinds = {
            "unary": target.raw(run.chat_body()),
            "stream": target.raw(run.chat_body(stream=True)),
        }
        for raw in kinds.values():  # warm up: the user seeded, the pools opened
            await _sequential(target.pool, raw, 5, stream=b'"stream":true' in raw)
        await asyncio.sleep(1.0)
        idle_cmds, idle_trips, idle_s = await _measure(gw, own, trips_file, target.pool, None, 5)
        print(f"idle, per second: commands {_per_request(idle_cmds, Counter(), 1, 0, 1)}")
        print(f"  round trips {dict((k, round(v / idle_s, 2)) for k, v in idle_trips.items())}")
        for kind, raw in kinds.items():
            cmds, trip, busy = await _measure(gw, own, trips_file, target.pool, raw, ns.requests)
            print(f"\n{kind}: {ns.requests} requests one at a time, {busy:.1f} s")
            print("  Redis commands per request (idle rate subtracted):")
            for k, v in _per_request(cmds, idle_cmds, idle_s, busy, ns.requests).items():
                print(f"    {v:7.3f}  {k}")
            print("  gateway round trips per request, by call site (idle rate subtracted):")
            for k, v in _per_request(trip, idle_trips, idle_s, busy, ns.requests).items():
                print(f"    {v:7.3f}  {k}")
        if ns.monitor:
            await _monitor(own, target, kinds)
        target.pool.close()
    finally:
        await gw.stop()
        await mock.stop()
        own.stop()
        shutil.rmtree(workdir, ignore_errors=True)


async def _monitor(own: OwnRedis, target: run.Target, kinds: dict[str, bytes]) -> None:
    client = redis.Redis.from_url(own.url)
    lines: list[str] = []

    def listen(stop: float) -> None:
        with client.monitor() as m:  # type: ignore[no-untyped-call]
            for entry in m.listen():
                if entry.get("client_type") == "lua":
                    continue  # what the scripts ran
                lines.append(
                    f"{entry['time']:.6f} {entry['client_address']}:"
                    f"{entry['client_port']} {entry['command'][:160]}"
                )
                if time.time() > stop:
                    return

    for kind, raw in kinds.items():
        lines.clear()
        listener = asyncio.to_thread(listen, time.time() + 1.5)
        task = asyncio.ensure_future(listener)
        await asyncio.sleep(0.3)
        await _sequential(target.pool, raw, 2, stream=kind == "stream")
        await task
        print(f"\nMONITOR, two {kind} requests:")
        print("\n".join(lines))
    client.close()


async def cpu(ns: argparse.Namespace) -> None:
    with_affinity = hasattr(os, "sched_setaffinity")
    if with_affinity:
        os.sched_setaffinity(0, {int(targets.CLIENT_CORE)})
    workdir = targets.workdir()
    own = OwnRedis(workdir / "redis").start()
    targets.REDIS_URL = own.url
    old_src = Path(tempfile.mkdtemp(prefix="mrbench-src-"))
    mock = await targets.start_mock(workdir)
    servers: list[targets.Server] = [mock]
    names = (ns.against, "working tree")
    kinds = ("unary", "unary closed", "stream")
    rows: dict[str, dict[str, list[float]]] = {n: {k: [] for k in kinds} for n in names}
    loads: list[float] = []
    try:
        shape = {"first_token_ms": 0, "chunks": ns.chunks, "gap_ms": 0}
        await post_once(HOST, mock.port, "/_config", orjson.dumps(shape))
        gws: dict[str, run.Target] = {}
        argvs = (targets.cli_with("", targets.source_at(ns.against, old_src)), targets.cli_with(""))
        for name, argv in zip(names, argvs, strict=True):
            gw = await targets.start_mindrouter("governed", mock.port, workdir, argv)
            servers.append(gw)
            gws[name] = run.Target(name, gw, gw.headers, Pool(HOST, gw.port))
        unary = {n: t.raw(run.chat_body()) for n, t in gws.items()}
        stream = {n: t.raw(run.chat_body(stream=True)) for n, t in gws.items()}
        for n, t in gws.items():
            await open_loop(t.pool, unary[n], ns.rate, 2.0)
            await closed_loop(t.pool, stream[n], ns.streams, 2.0, stream=True)
        for round_ in range(1, ns.rounds + 1):
            order = list(gws.items()) if round_ % 2 else list(reversed(gws.items()))
            for n, t in order:
                await asyncio.sleep(0.5)
                t.server.refresh_pids()
                for kind in kinds:
                    c0 = t.server.cpu()
                    if kind == "unary":
                        load = open_loop(t.pool, unary[n], ns.rate, ns.duration)
                    else:
                        body = stream[n] if kind == "stream" else unary[n]
                        streamed = kind == "stream"
                        load = closed_loop(t.pool, body, ns.streams, ns.duration, stream=streamed)
                    results, _ = await load
                    await asyncio.sleep(0.3)
                    ok = sum(r.ok for r in results)
                    rows[n][kind].append((t.server.cpu() - c0) / max(1, ok) * 1e3)
                loads.append(os.getloadavg()[0])
                print(
                    f"  r{round_} {n:<14} "
                    + "  ".join(f"{k} {rows[n][k][-1]:.3f}" for k in kinds)
                    + f" ms/req  load {loads[-1]:.2f}",
                    flush=True,
                )
        for t in gws.values():
            t.pool.close()
    finally:
        await targets.stop_all(servers, workdir, old_src)
        own.stop()
    print(
        f"\nCPU ms per request, medians of {ns.rounds} interleaved rounds of {ns.duration:g} s "
        f"(unary: open loop {ns.rate:g}/s, then closed loop {ns.streams} at a time; "
        f"{ns.streams} streams of {ns.chunks} chunks, closed loop); load average "
        f"{min(loads):.2f}-{max(loads):.2f}"
    )
    base = {k: statistics.median(rows[names[0]][k]) for k in kinds}
    for n in names:
        cells = []
        for k in kinds:
            m = statistics.median(rows[n][k])
            rel = (m - base[k]) / base[k] if base[k] and not math.isnan(base[k]) else 0.0
            cells.append(
                f"{k} {m:.3f} ({rel:+.1%}; " + ", ".join(f"{v:.2f}" for v in rows[n][k]) + ")"
            )
        print(f"  {n:<14} " + "  ".join(cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("trips")
    t.add_argument("--requests", type=int, default=200)
    t.add_argument("--monitor", action="store_true")
    t.add_argument("--rev", help="run the gateway from this git revision's source")
    c = sub.add_parser("cpu")
    c.add_argument("--against", required=True)
    c.add_argument("--rounds", type=int, default=6)
    c.add_argument("--duration", type=float, default=10.0)
    c.add_argument("--rate", type=float, default=100.0)
    c.add_argument("--streams", type=int, default=8)
    c.add_argument("--chunks", type=int, default=16)
    ns = parser.parse_args()
    asyncio.run(trips(ns) if ns.mode == "trips" else cpu(ns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
