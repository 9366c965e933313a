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
}


def launcher(variant: str) -> list[str] | None:
    """argv that starts `mindrouter` with the variant applied, or None for the plain CLI."""
    prelude = VARIANTS[variant]
    if not prelude:
        return None
    code = f"{prelude}\nimport sys\nfrom mindrouter.cli import main\nsys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", code]
