"""Instruments for the gateway's process: code run before `mindrouter.cli.main` that measures
instead of changing anything (the collector's time, a deterministic profile, the event loop's
stalls, a request's stages, the garbage in reference cycles). `variants.py` offers them beside
the candidate changes, so the profile and compare commands run them the same way.
"""

from __future__ import annotations

# What every instrument ends with: its report's lines into /tmp/<kind>-<pid>.txt.
_REPORT = """
import os as _mr_os
def _mr_report(kind, lines):
    with open(f"/tmp/{kind}-{_mr_os.getpid()}.txt", "w") as f:
        f.write("\\n".join(lines) + "\\n")
"""

# Not a candidate but an instrument: the time the collector takes, by generation, from 13 s after
# the start (past the start-up and the warm-up) to the exit, into /tmp/gcstats-<pid>.txt.
GC_STATS = (
    _REPORT
    + """
import atexit as _mr_atexit, gc as _mr_gc, time as _mr_time
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
    _mr_report("gcstats", [repr(seen)])
_mr_atexit.register(_mr_gc_dump)
"""
)


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


# Not a candidate but an instrument: a deterministic profile of the event loop's thread from 13 s
# after the start (past the start-up and the warm-up, so that what it counts is the requests'),
# written when the gateway exits, into /tmp/mindrouter-<pid>.pstats (pstats format): exact call
# counts per request, where py-spy's samples give only shares. Divide by the calls of a plain
# function that runs once per request (`record_outcome`): cProfile counts every resumption of a
# coroutine as a call. Its own cost inflates small functions most.
CPROFILE = """
import asyncio as _mr_asyncio, atexit as _mr_atexit, cProfile as _mr_cprofile, os as _mr_os
import mindrouter.cli as _mr_cli
_mr_profiler = _mr_cprofile.Profile()
async def _mr_profile_later():
    await _mr_asyncio.sleep(13)
    _mr_profiler.enable()  # in the event loop's thread: the profile is per thread
_mr_atexit.register(lambda: _mr_profiler.dump_stats(f"/tmp/mindrouter-{_mr_os.getpid()}.pstats"))
""" + _alongside("_mr_profile_later")


# Not a candidate but an instrument: how often and how long the event loop stalls, and the
# collector's share in it. From 13 s after the start, a timer every millisecond notes how late
# it ran, and the collector's pauses are timed by generation; into /tmp/stalls-<pid>.txt at exit.
STALLS = (
    _REPORT
    + """
import asyncio as _mr_asyncio, atexit as _mr_atexit, gc as _mr_gc, time as _mr_time
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
    _mr_report("stalls", lines)
_mr_atexit.register(_mr_dump)
"""
    + _alongside("_mr_heart")
)

# Not a candidate but an instrument: where a request's wall time goes. From 13 s after the start,
# each chat completion's stages are timed in its own task (the edge to the admission, the
# admission's Redis round trip, the audit record and the fair gate, the wait for the record's
# commit, the engine call with its decoding, the clean-up and three of its parts, the response,
# and the parts of the stretch before the admission), and the audit writer's statements (the
# records' inserts, the outcomes' batches) from send to reply; the median and mean of each go to
# /tmp/stages-<pid>.txt at exit.
STAGES = (
    _REPORT
    + """
import asyncio as _mr_asyncio, atexit as _mr_atexit, inspect as _mr_inspect, time as _mr_time
from mindrouter.http.disconnect import CancelOnDisconnect as _mr_Cod
from mindrouter.pipeline import flight as _mr_flight
from mindrouter.pipeline.dispatch import Dispatcher as _mr_Disp
_mr_t0, _mr_open, _mr_done = _mr_time.monotonic(), {}, []
def _mr_mark(name):
    marks = _mr_open.get(_mr_asyncio.current_task())
    if marks is not None:
        marks[name] = _mr_time.perf_counter()
def _mr_timed(owner, attr, start, end=None):
    # Marks `start` when owner.attr is called and `end` (if any) when it returns.
    inner = getattr(owner, attr)
    if _mr_inspect.iscoroutinefunction(inner):
        async def timed(*args, **kwargs):
            _mr_mark(start)
            try:
                return await inner(*args, **kwargs)
            finally:
                if end:
                    _mr_mark(end)
    else:
        def timed(*args, **kwargs):
            _mr_mark(start)
            try:
                return inner(*args, **kwargs)
            finally:
                if end:
                    _mr_mark(end)
    setattr(owner, attr, timed)
from mindrouter.http import edge as _mr_edge, entry as _mr_entry
from mindrouter.pipeline.audit import AuditRecord as _mr_AR
_mr_timed(_mr_edge.Edge, "__call__", "edge")
_mr_timed(_mr_entry, "new_context", "ctx", "ctxd")
_mr_timed(_mr_entry, "decode_body", "body", "bodyd")
_mr_timed(_mr_flight, "estimate_request_input", "est", "estd")
_mr_timed(_mr_flight, "admit", "admit", "admitted")
_mr_timed(_mr_flight, "schedule", "schedule", "scheduled")
_mr_timed(_mr_flight.Flight, "recorded", "recorded", "committed")
_mr_timed(_mr_Disp, "run", "run", "ran")
_mr_timed(_mr_flight.Flight, "close", "close", "closed")
_mr_timed(_mr_AR, "complete", "acomplete", "acompleted")
_mr_timed(_mr_flight, "settle", "settle", "settled")
_mr_timed(_mr_flight, "record_outcome", "rec", "recd")
from mindrouter.stores.sql.audit_pg import PgAuditConnection as _mr_Pg
_mr_writes = {"insert": [], "complete": []}
def _mr_write_timed(attr):
    inner = getattr(_mr_Pg, attr)
    async def timed(self, rows):
        start = _mr_time.perf_counter()
        try:
            return await inner(self, rows)
        finally:
            if _mr_time.monotonic() >= _mr_t0 + 13:
                _mr_writes[attr].append((_mr_time.perf_counter() - start, len(rows)))
    setattr(_mr_Pg, attr, timed)
_mr_write_timed("insert")
_mr_write_timed("complete")
_mr_cod_call = _mr_Cod.__call__
async def _mr_cod(self, scope, receive, send):
    if scope.get("path") != "/v1/chat/completions" or _mr_time.monotonic() < _mr_t0 + 13:
        return await _mr_cod_call(self, scope, receive, send)
    task = _mr_asyncio.current_task()
    _mr_open[task] = marks = {"in": _mr_time.perf_counter()}
    try:
        return await _mr_cod_call(self, scope, receive, send)
    finally:
        marks["out"] = _mr_time.perf_counter()
        _mr_done.append(_mr_open.pop(task))
_mr_Cod.__call__ = _mr_cod
_MR_STAGES = (
    ("edge, body, estimate", "in", "admit"),
    ("admission (Redis)", "admit", "admitted"),
    ("audit record, fair gate", "admitted", "scheduled"),
    ("to the commit wait", "scheduled", "recorded"),
    ("audit commit wait", "recorded", "committed"),
    ("engine call and decoding", "committed", "ran"),
    ("to the clean-up", "ran", "close"),
    ("clean-up", "close", "closed"),
    ("response", "closed", "out"),
    ("whole request", "in", "out"),
    ("in the clean-up: the audit outcome", "acomplete", "acompleted"),
    ("in the clean-up: the settlement (its Redis write)", "settle", "settled"),
    ("in the clean-up: metrics and log line", "rec", "recd"),
    ("before admission: to the edge", "in", "edge"),
    ("before admission: the edge (checks, key) to the context", "edge", "ctx"),
    ("before admission: the request's context", "ctx", "ctxd"),
    ("before admission: to the body (the route's caller)", "ctxd", "body"),
    ("before admission: the body's JSON", "body", "bodyd"),
    ("before admission: the dialect's decoding, the flight", "bodyd", "est"),
    ("before admission: the input estimate", "est", "estd"),
)
def _mr_stages_dump():
    whole = [m for m in _mr_done if all(k in m for _, a, b in _MR_STAGES for k in (a, b))]
    lines = [f"requests {len(whole)} (of {len(_mr_done)} timed)", "stage | p50 ms | mean ms"]
    for name, a, b in _MR_STAGES:
        ds = sorted((m[b] - m[a]) * 1000 for m in whole) or [0.0]
        lines.append(f"{name} | {ds[len(ds) // 2]:.3f} | {sum(ds) / len(ds):.3f}")
    for attr, label in (("insert", "record inserts"), ("complete", "outcome batches")):
        ds = sorted(d * 1000 for d, _ in _mr_writes[attr]) or [0.0]
        rows = sum(n for _, n in _mr_writes[attr])
        p50, p99 = ds[len(ds) // 2], ds[int(len(ds) * 0.99)]
        lines.append(f"{label}: {len(_mr_writes[attr])} ({rows} rows), p50 {p50:.3f} ms, "
                     f"mean {sum(ds) / len(ds):.3f} ms, p99 {p99:.3f} ms")
    _mr_report("stages", lines)
_mr_atexit.register(_mr_stages_dump)
"""
)

# Not a candidate but an instrument: the garbage only the collector can free (objects in
# reference cycles). 18 s after the start, one full collection keeping what it finds
# (`DEBUG_SAVEALL`): the garbage by type, and for a few types one cycle through an object of
# that type, into /tmp/cycles-<pid>.txt.
CYCLES = (
    _REPORT
    + """
import asyncio as _mr_asyncio, collections as _mr_coll, gc as _mr_gc
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
    _mr_report("cycles", lines)
    del garbage
"""
    + _alongside("_mr_cycles")
)


# Not a candidate but an instrument: every timer the gateway asks its event loop for, by where
# it asked (the innermost three frames outside asyncio), per request (a call of `record_outcome`),
# from 13 s after the start to the exit; into /tmp/timers-<pid>.txt. Setting and cancelling a
# timer costs uvloop a few microseconds, and an `asyncio.timeout` block about three times that.
TIMERS = (
    _REPORT
    + """
import atexit as _mr_atexit, collections as _mr_col, sys as _mr_sys, time as _mr_time
import uvloop as _mr_uvloop
import mindrouter.pipeline.flight as _mr_flight
_mr_t0, _mr_sites, _mr_requests = _mr_time.monotonic(), _mr_col.Counter(), [0]
def _mr_on():
    return _mr_time.monotonic() > _mr_t0 + 13
def _mr_site():
    f, parts = _mr_sys._getframe(2), []
    while f is not None and len(parts) < 3:
        name = f.f_code.co_filename
        if "/asyncio/" not in name or not parts:
            short = name.rsplit("site-packages/", 1)[-1].rsplit("/src/", 1)[-1]
            parts.append(f"{short}:{f.f_lineno} {f.f_code.co_name}")
        f = f.f_back
    return " <- ".join(parts)
class _MrLoop(_mr_uvloop.Loop):
    # uvloop's `call_at` calls this method too.
    def call_later(self, delay, callback, *args, context=None):
        if _mr_on():
            _mr_sites[_mr_site()] += 1
        return super().call_later(delay, callback, *args, context=context)
_mr_uvloop.Loop = _MrLoop
_mr_uvloop.new_event_loop = _MrLoop
_mr_outcome = _mr_flight.record_outcome
def _mr_counted(*args, **kwargs):
    if _mr_on():
        _mr_requests[0] += 1
    return _mr_outcome(*args, **kwargs)
_mr_flight.record_outcome = _mr_counted
def _mr_timers_dump():
    n = max(1, _mr_requests[0])
    lines = [f"{_mr_requests[0]} requests, {sum(_mr_sites.values()) / n:.2f} timers a request"]
    lines += [f"{c / n:7.3f}  {site}" for site, c in _mr_sites.most_common() if c / n >= 0.005]
    _mr_report("timers", lines)
_mr_atexit.register(_mr_timers_dump)
"""
)
