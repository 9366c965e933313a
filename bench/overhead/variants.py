"""Candidate hot-path changes, applied from outside the source tree to measure them first.

Each variant is Python run before `mindrouter.cli.main`, in the gateway's own process: it swaps
the event loop, adjusts the SQL stores, or wraps `build_app` to adjust the finished app. The
changes mirror what a one- or two-line edit to src/ would do (or undo); the comparison runs
every variant side by side, interleaved, at the same rate.
"""

from __future__ import annotations

import sys

# The event loop asyncio ships with, instead of uvloop (which `mindrouter serve` uses).
_ASYNCIO_LOOP = """
import asyncio as _mr_asyncio
import mindrouter.cli as _mr_cli
_mr_cli._event_loop_runner = lambda: _mr_asyncio.run
"""

# Adjusts the SQL stores the gateway opens; `{body}` changes `stores` (a SqlStores).
_PATCH_STORES = """
import mindrouter.stores.sql as _mr_sql
import mindrouter.stores.sql.bundle as _mr_bundle
_mr_open = _mr_bundle.open_stores
def _mr_open_patched(url, **kw):
    stores = _mr_open(url, **kw)
{body}
    return stores
_mr_sql.open_stores = _mr_bundle.open_stores = _mr_open_patched
"""

# Audit records through SQLAlchemy on the shared, pinged pool, as before the asyncpg writer.
_SQLALCHEMY_AUDIT = _PATCH_STORES.format(
    body="    stores.audit.pg = stores.audit.outcomes_pg = None"
)

# Every audit outcome written as soon as nothing else is queued, not gathered for 50 ms.
_EAGER_COMPLETE = _PATCH_STORES.format(body="    stores.audit.complete_delay = 0.0")

# The request waits for its clean-up (slot, audit outcome queued, limits settled in Redis, metrics)
# before its response goes out; here the clean-up runs on after the response.
_CLOSE_BEHIND = """
import asyncio as _mr_asyncio
from mindrouter.pipeline import flight as _mr_flight
_mr_close_now = _mr_flight.Flight.close
async def _mr_close(self):
    task = _mr_asyncio.ensure_future(_mr_close_now(self))
    _mr_flight._CLOSING.add(task)
    task.add_done_callback(_mr_flight._CLOSING.discard)
_mr_flight.Flight.close = _mr_close
"""


# The gateway without its web console (`console.enabled: false`): the console is mounted after
# every API route and wraps nothing else, so this should measure the same as the default.
_CONSOLE_OFF = """
import mindrouter.app as _mr_app
_mr_build = _mr_app.build_app
def _mr_patched(settings, stores=None):
    settings.console.enabled = False
    return _mr_build(settings, stores)
_mr_app.build_app = _mr_patched
"""


# Not a candidate but an instrument: the time the collector takes, by generation, from 13 s after
# the start (past the start-up and the warm-up) to the exit, into /tmp/gcstats-<pid>.txt.
_GC_STATS = """
import atexit as _mr_atexit, gc as _mr_gc, os as _mr_os, time as _mr_time
_mr_gc_t0, _mr_gc_times, _mr_gc_counts, _mr_gc_at = _mr_time.monotonic(), {}, {}, [0.0]
def _mr_gc_cb(phase, info):
    if _mr_time.monotonic() < _mr_gc_t0 + 13:
        return
    if phase == "start":
        _mr_gc_at[0] = _mr_time.perf_counter()
        return
    g = info["generation"]
    _mr_gc_times[g] = _mr_gc_times.get(g, 0.0) + _mr_time.perf_counter() - _mr_gc_at[0]
    _mr_gc_counts[g] = _mr_gc_counts.get(g, 0) + 1
_mr_gc.callbacks.append(_mr_gc_cb)
def _mr_gc_dump():
    seen = {"seconds": _mr_gc_times, "collections": _mr_gc_counts,
            "tracked": len(_mr_gc.get_objects())}
    with open(f"/tmp/gcstats-{_mr_os.getpid()}.txt", "w") as f:
        f.write(repr(seen) + "\\n")
_mr_atexit.register(_mr_gc_dump)
"""

# `mindrouter serve` freezes what it built before serving; this undoes that.
_GC_UNFROZEN = """
import gc as _mr_gc
_mr_gc.freeze = lambda: None
"""

# What reading a non-streamed answer as the engine's stream costs: the engine asked for a whole
# answer instead (one JSON body, no per-chunk tally, journal or assembly). Not a candidate as it
# stands: a client that leaves mid-answer would be charged nothing for what was generated.
_UNARY_UPSTREAM = """
from mindrouter import canonical as _mr_canonical
from mindrouter.pipeline import gateway as _mr_gateway
async def _mr_whole(adapter, req):
    if isinstance(req, _mr_canonical.ChatRequest):
        return await adapter.chat(req)
    return await adapter.complete(req)
async def _mr_generate(self, ctx, req):
    return await self._unary(ctx, req, lambda flight: _mr_whole)
_mr_gateway.Gateway.generate = _mr_generate
"""

# Not a candidate but an instrument: a deterministic profile of the event loop's thread, written
# when the gateway exits, into /tmp/mindrouter-<pid>.pstats (pstats format): exact call counts
# per request, where py-spy's samples give only shares. Divide by the calls of a plain function
# that runs once per request (`record_outcome`): cProfile counts every resumption of a
# coroutine as a call. Its own cost inflates small functions most.
_CPROFILE = """
import atexit as _mr_atexit
import cProfile as _mr_cprofile
import os as _mr_os
_mr_profiler = _mr_cprofile.Profile()
_mr_profiler.enable()
_mr_atexit.register(lambda: _mr_profiler.dump_stats(f"/tmp/mindrouter-{_mr_os.getpid()}.pstats"))
"""


def _alongside(coroutine: str) -> str:
    """Code that runs the instrument's `coroutine()` in the gateway's event loop beside the
    server (the prelude runs before the loop exists)."""
    return f"""
_mr_run = _mr_cli._event_loop_runner()
async def _mr_beside(coro):
    task = _mr_asyncio.ensure_future({coroutine}())
    try:
        return await coro
    finally:
        task.cancel()
_mr_cli._event_loop_runner = lambda: (lambda coro: _mr_run(_mr_beside(coro)))
"""


# Not a candidate but an instrument: how often and how long the event loop stalls, and the
# collector's share in it. From 13 s after the start, a timer every millisecond notes how late
# it ran, and the collector's pauses are timed by generation; into /tmp/stalls-<pid>.txt at exit.
_STALLS = """
import asyncio as _mr_asyncio, atexit as _mr_atexit, gc as _mr_gc, os as _mr_os, time as _mr_time
import mindrouter.cli as _mr_cli
_mr_st = {"late": [], "gc": [], "on": False}
def _mr_gc_cb(phase, info, _at=[0.0]):
    if not _mr_st["on"]:
        return
    if phase == "start":
        _at[0] = _mr_time.perf_counter()
    else:
        _mr_st["gc"].append((info["generation"], _mr_time.perf_counter() - _at[0]))
_mr_gc.callbacks.append(_mr_gc_cb)
async def _mr_heart():
    loop = _mr_asyncio.get_running_loop()
    await _mr_asyncio.sleep(13)
    _mr_st["on"] = True
    while True:
        due = loop.time() + 0.001
        await _mr_asyncio.sleep(0.001)
        _mr_st["late"].append(loop.time() - due)
def _mr_dump():
    late = sorted(_mr_st["late"]) or [0.0]
    n = len(late)
    lines = [f"timer runs {n}"]
    for q in (50, 99, 99.9):
        lines.append(f"late p{q}: {late[min(n - 1, int(q / 100 * n))] * 1000:.2f} ms")
    for lo, hi in ((1, 2), (2, 5), (5, 10), (10, None)):
        k = sum(lo <= x * 1000 and (hi is None or x * 1000 < hi) for x in late)
        lines.append(f"late {lo}-{hi or ''} ms: {k}")
    for g in (0, 1, 2):
        ts = [d for gen, d in _mr_st["gc"] if gen == g]
        if ts:
            lines.append(f"collector gen {g}: {len(ts)} pauses, {sum(ts) * 1000:.1f} ms in all, "
                         f"longest {max(ts) * 1000:.2f} ms")
    with open(f"/tmp/stalls-{_mr_os.getpid()}.txt", "w") as f:
        f.write("\\n".join(lines) + "\\n")
_mr_atexit.register(_mr_dump)
""" + _alongside("_mr_heart")

# Not a candidate but an instrument: the garbage only the collector can free (objects in
# reference cycles). 18 s after the start, one full collection keeping what it finds
# (`DEBUG_SAVEALL`): the garbage by type, and for a few types one cycle through an object of
# that type, into /tmp/cycles-<pid>.txt.
_CYCLES = """
import asyncio as _mr_asyncio, collections as _mr_coll, gc as _mr_gc, os as _mr_os
import mindrouter.cli as _mr_cli
def _mr_name(o):
    n = type(o).__qualname__
    code = getattr(getattr(o, "__func__", o), "__code__", None)
    code = code or getattr(o, "cr_code", None) or getattr(o, "ag_code", None)
    return f"{n}[{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}]" if code else n
def _mr_cycle(start, ids):
    # breadth-first from `start` through garbage only, back to `start`: the loop's objects
    parent = {id(start): None}
    seen = {id(start): start}
    queue = [start]
    while queue:
        o = queue.pop(0)
        for r in _mr_gc.get_referents(o):
            if r is start:
                path = [o]
                while parent[id(path[-1])] is not None:
                    path.append(seen[parent[id(path[-1])]])
                return path[::-1] + [start]
            if id(r) in ids and id(r) not in parent:
                parent[id(r)] = id(o)
                seen[id(r)] = r
                queue.append(r)
    return []
async def _mr_cycles():
    await _mr_asyncio.sleep(18)
    _mr_gc.set_debug(_mr_gc.DEBUG_SAVEALL)
    _mr_gc.collect()
    garbage = list(_mr_gc.garbage)
    _mr_gc.garbage.clear()
    _mr_gc.set_debug(0)
    ids = {id(o) for o in garbage}
    c = _mr_coll.Counter(_mr_name(o) for o in garbage)
    lines = [f"garbage {len(garbage)} objects"] + [f"  {k:7d} {n}" for n, k in c.most_common(60)]
    kinds = ("RequestContext", "RequestResponseCycle", "Task", "Future", "AuditRecord")
    for want in kinds:
        for o in garbage:
            if type(o).__qualname__ == want:
                path = _mr_cycle(o, ids)
                lines.append(f"cycle through {want}: " + " -> ".join(_mr_name(x) for x in path))
                break
    with open(f"/tmp/cycles-{_mr_os.getpid()}.txt", "w") as f:
        f.write("\\n".join(lines) + "\\n")
    del garbage
""" + _alongside("_mr_cycles")

# The response's status line and headers written together with its first body bytes: one
# socket write instead of two for every response (uvicorn writes the head at
# `http.response.start` at once). A measurement only: the head is held on the server's response
# cycle and prefixed to the body's first write, which a stream's first chunk always makes (it
# goes through `send`, never straight to the socket).
_HEAD_WITH_BODY = """
import uvicorn.protocols.http.httptools_impl as _mr_h
class _MrHold:
    def __init__(self, transport):
        self.transport, self.data = transport, b""
    def write(self, data):
        self.data += data
    def close(self):
        self.transport.close()
class _MrPrefix(_MrHold):
    def write(self, data):
        self.transport.write(self.data + data)
        self.data = b""
_mr_send = _mr_h.RequestResponseCycle.send
async def _mr_send_held(self, message):
    real, held = self.transport, getattr(self, "_mr_head", b"")
    if message["type"] == "http.response.start":
        self.transport = _MrHold(real)
    elif held:
        self.transport = _MrPrefix(real)
        self.transport.data, self._mr_head = held, b""
    try:
        await _mr_send(self, message)
    finally:
        wrapper, self.transport = self.transport, real
    if message["type"] == "http.response.start":
        self._mr_head = wrapper.data
_mr_h.RequestResponseCycle.send = _mr_send_held
"""

# Changes measured this way and since made in src/ (uvloop, hiredis, FastAPI's telemetry off,
# the hot routes first, the audit pool without pre-ping, outcomes gathered for 50 ms, the
# collector's freeze) are gone from this table; the first three variants and `gc-unfrozen`
# measure what those changes bought by undoing them.
VARIANTS: dict[str, str] = {
    "default": "",
    "asyncio-loop": _ASYNCIO_LOOP,
    "sqlalchemy-audit": _SQLALCHEMY_AUDIT,
    "eager-complete": _EAGER_COMPLETE,
    "close-behind": _CLOSE_BEHIND,
    "unary-upstream": _UNARY_UPSTREAM,
    "console-off": _CONSOLE_OFF,
    "gc-unfrozen": _GC_UNFROZEN,
    "gc-stats": _GC_STATS,
    "gc-unfrozen-stats": _GC_UNFROZEN + _GC_STATS,
    "cprofile": _CPROFILE,
    "stalls": _STALLS,
    "cycles": _CYCLES,
    "head-with-body": _HEAD_WITH_BODY,
}


def launcher(variant: str) -> list[str] | None:
    """argv that starts `mindrouter` with the variant applied, or None for the plain CLI."""
    prelude = VARIANTS[variant]
    if not prelude:
        return None
    code = f"{prelude}\nimport sys\nfrom mindrouter.cli import main\nsys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", code]
