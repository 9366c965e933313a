"""Instructions per request: the governed gateway's CPU cost counted, not timed.

    .venv/bin/python -m bench.overhead.instructions [--against REV] [--requests 30] [--rounds 5]

Runs the governed gateway (and, with `--against`, a second one from a revision's source) under
valgrind's callgrind, in front of the overhead benchmark's mock, on a redis-server of its own
and a fresh PostgreSQL database each. The load goes one request at a time, the client and the
mock natively; callgrind counts the instructions the gateway's process executes (Python, the C
extensions, libc; not the kernel's), which, unlike CPU seconds on a shared virtual machine,
come out nearly the same run after run. Each round, for each kind of request (SHAPES), zeroes
the counters, sends `--requests` of them and dumps; and it measures an idle spell, whose rate
is taken out. The gateway's own periodic work is slowed down (`_QUIET`, QUIET). The figures:
instructions per request, and per chunk beyond a stream's first ones, medians over the rounds
with their spread.

Read them against each other (working tree against `--against`), not as the native cost:
under callgrind the gateway runs about fifty times slower, so what depends on timing differs
(the audit writer's batches hold one or two rows). `--keep DIR` keeps the dumps, for
`callgrind_annotate DIR/gw<i>.<pid>.<n>`: with Python 3.11 the interpreter's frames are not told
apart, but exceptions raised and caught, formatting, allocation and the extensions' own work
are. docs/benchmarks.md says how exact the figures are.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench.harness import OwnRedis
from bench.overhead import run, targets
from bench.overhead.client import Pool, Result, post_once
from bench.overhead.targets import HOST

IDLE_S = 4.0
# What the mock sends for each kind of request: a whole answer of 16 chunks at once; streams of
# 8 and of 40 chunks, 5 ms apart (far enough apart under callgrind that each is a read of its
# own, as natively at the benchmark's 10 ms). A chunk costs (long - short) / 32.
SHAPES = {
    "unary": {"first_token_ms": 0, "chunks": 16, "gap_ms": 0},
    "stream": {"first_token_ms": 0, "chunks": 8, "gap_ms": 5},
    "long stream": {"first_token_ms": 0, "chunks": 40, "gap_ms": 5},
}
EXTRA_CHUNKS = SHAPES["long stream"]["chunks"] - SHAPES["stream"]["chunks"]


# The gateway's own background work, slowed down SLOWER times. Under callgrind a request takes
# tens of milliseconds, so at their usual pauses the exchanges with Redis (slot board, fair
# share, breakers: every 50 ms while requests run) and the key epoch's poll (an SQL query every
# 0.5 s) would fall on each request once or several times, at moments that vary from run to
# run: noise that is not the request's. Slowed down, about as many fall on a request as
# natively at a few hundred requests a second. What a request itself asks for (an exchange
# poked after a dispatch, an audit write) is not slowed. Run in the gateway before
# `mindrouter.cli.main`; the settings that have a key are set in the configuration (QUIET).
SLOWER = 20.0
_QUIET = f"""
from mindrouter.identity.authenticate import AuthTuning
from mindrouter.stores.breakers import SharedBreakers
from mindrouter.stores.fairshare.redis_state import RedisFairShareState
from mindrouter.stores.slots.board import SharedSlots
for _cls in (SharedBreakers, RedisFairShareState, SharedSlots):
    _cls._pause = (lambda pause: lambda self: pause(self) * {SLOWER})(_cls._pause)
def _slowed(check):
    def post_init(self):
        object.__setattr__(self, "poll_interval", self.poll_interval * {SLOWER})
        object.__setattr__(self, "max_staleness", self.max_staleness * {SLOWER})
        check(self)
    return post_init
AuthTuning.__post_init__ = _slowed(AuthTuning.__post_init__)
"""
QUIET = {"heartbeat_s": 40.0, "instance_stale_s": 120.0, "health_interval_s": 200.0}


def _valgrind(argv: list[str], out: Path) -> list[str]:
    """`argv` under callgrind, counting nothing until told (`callgrind_control -i on`)."""
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}.%p",
        *argv,
    ]


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], capture_output=True, check=True)


def _dumped(stem: Path, before: set[Path]) -> int:
    """The instruction total of the dump that appeared since `before`."""
    for _ in range(200):
        new = sorted(set(stem.parent.glob(stem.name + ".*.*")) - before)
        if new:
            text = new[-1].read_text()
            for line in text.splitlines():
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
        time.sleep(0.05)
    raise RuntimeError(f"callgrind wrote no dump for {stem.name}")


class Counted:
    """One gateway under callgrind and its load client."""

    def __init__(self, name: str, target: run.Target, stem: Path) -> None:
        self.name = name
        self.target = target
        self.stem = stem
        self.pid = target.server.proc.pid  # taskset execs valgrind, which runs the program

    async def count(self, raw: bytes | None, n: int, *, stream: bool = False) -> tuple[int, float]:
        """Instructions and seconds for `n` requests of `raw` one at a time (None: idle)."""
        before = set(self.stem.parent.glob(self.stem.name + ".*.*"))
        if raw is not None:  # uncounted: a kept-alive connection the gateway closed meanwhile
            await self.target.pool.send(raw, Result(due=0.0), stream=stream, timeout=120)
        _control(self.pid, "--zero")
        t0 = time.monotonic()
        if raw is None:
            await asyncio.sleep(IDLE_S)
        else:
            for _ in range(n):
                r = Result(due=time.monotonic())
                await self.target.pool.send(raw, r, stream=stream, timeout=120)
                if not r.ok:
                    raise RuntimeError(f"{self.name}: a request failed: {r.error}")
        elapsed = time.monotonic() - t0
        _control(self.pid, "--dump")
        return _dumped(self.stem, before), elapsed


async def main(ns: argparse.Namespace) -> None:
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    os.environ["PYTHONHASHSEED"] = "0"  # the same hashing, so the same work, in every run
    workdir = targets.workdir()
    keep = Path(ns.keep) if ns.keep else workdir
    keep.mkdir(parents=True, exist_ok=True)
    own = OwnRedis(workdir / "redis").start()
    targets.REDIS_URL = own.url
    old_src = Path(tempfile.mkdtemp(prefix="mrbench-src-"))
    mock = await targets.start_mock(workdir)
    servers: list[targets.Server] = [mock]
    try:
        argvs = {"working tree": targets.cli_with(_QUIET)}
        if ns.against:
            src = targets.source_at(ns.against, old_src)
            argvs = {ns.against: targets.cli_with(_QUIET, src), **argvs}
        gws: list[Counted] = []
        for i, (name, argv) in enumerate(argvs.items()):
            stem = keep / f"gw{i}"
            gw = await targets.start_mindrouter(
                "governed",
                mock.port,
                workdir,
                _valgrind(argv, stem),
                targets.Variant(name=f"gw{i}", config=QUIET),
            )
            servers.append(gw)
            gws.append(Counted(name, run.Target(name, gw, gw.headers, Pool(HOST, gw.port)), stem))
        kinds = (*SHAPES, "idle")
        per: dict[str, dict[str, list[float]]] = {g.name: {k: [] for k in kinds} for g in gws}
        for g in gws:
            for kind, raw in _bodies(g).items():  # warm up: the pools, the caches
                await _shape(mock, kind)
                for _ in range(10):
                    await g.target.pool.send(raw, Result(due=0.0), stream=kind != "unary")
            _control(g.pid, "--instr=on")
        # Round 0 warms the gateways up under callgrind and is not counted: the first spells
        # measured came out several per cent above the rest.
        for round_ in range(ns.rounds + 1):
            for g in gws if round_ % 2 else reversed(gws):
                raws = _bodies(g)
                idle, idle_s = await g.count(None, 0)
                rate = idle / idle_s
                if round_:
                    per[g.name]["idle"].append(rate)
                cells = [f"idle {rate / 1e6:.2f} M/s"]
                for kind, raw in raws.items():
                    await _shape(mock, kind)
                    total, elapsed = await g.count(raw, ns.requests, stream=kind != "unary")
                    value = (total - rate * elapsed) / ns.requests
                    if round_:
                        per[g.name][kind].append(value)
                    cells.append(f"{kind} {value / 1e3:,.0f} k ({elapsed:.1f} s)")
                warm = "" if round_ else "  (warm-up, not counted)"
                print(f"  r{round_} {g.name:<14} " + "  ".join(cells) + warm, flush=True)
        _report(ns, gws, per)
        for g in gws:
            g.target.pool.close()
    finally:
        await targets.stop_all(servers, old_src)
        own.stop()
        if not ns.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _bodies(g: Counted) -> dict[str, bytes]:
    streamed = g.target.raw(run.chat_body(stream=True))
    return {"unary": g.target.raw(run.chat_body()), "stream": streamed, "long stream": streamed}


async def _shape(mock: targets.Server, kind: str) -> None:
    await post_once(HOST, mock.port, "/_config", orjson.dumps(SHAPES[kind]))


def _report(
    ns: argparse.Namespace, gws: list[Counted], per: dict[str, dict[str, list[float]]]
) -> None:
    for g in gws:  # a chunk: what a long stream costs beyond a short one, per extra chunk
        rows = per[g.name]
        rows["chunk"] = [
            (long - short) / EXTRA_CHUNKS
            for long, short in zip(rows["long stream"], rows["stream"], strict=True)
        ]
    print(
        f"\nInstructions (thousands), medians of {ns.rounds} rounds of {ns.requests} requests of "
        "each kind one at a time, the idle rate taken out: a non-streamed request (16 chunks "
        f"from the engine), a stream of {SHAPES['stream']['chunks']} chunks, and a chunk "
        f"(a stream of {SHAPES['long stream']['chunks']} against one of "
        f"{SHAPES['stream']['chunks']})"
    )
    base = per[gws[0].name]
    for g in gws:
        cells = []
        for kind in ("unary", "stream", "chunk"):
            values = per[g.name][kind]
            m = statistics.median(values)
            rel = m / statistics.median(base[kind]) - 1
            spread = (max(values) - min(values)) / m if m else 0.0
            cells.append(f"{kind} {m / 1e3:,.1f} ({rel:+.2%}, spread {spread:.1%})")
        idle = statistics.median(per[g.name]["idle"]) / 1e6
        print(f"  {g.name:<14} " + "  ".join(cells) + f"  idle {idle:.2f} M/s")


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", help="also count a gateway from this revision's source")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keep", help="keep the callgrind dumps in this directory")
    asyncio.run(main(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
