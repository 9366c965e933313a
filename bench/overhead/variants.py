"""Candidate hot-path changes, applied from outside the source tree to measure them first.

Each variant is Python run before `mindrouter.cli.main`, in the gateway's own process: it swaps
the event loop, adjusts the SQL stores, or wraps `build_app` to adjust the finished app. The
changes mirror what a one- or two-line edit to src/ would do (or undo); the comparison runs
every variant side by side, interleaved, at the same rate.
"""

from __future__ import annotations

from bench.overhead.instruments import CPROFILE, CYCLES, GC_STATS, STAGES, STALLS, TIMERS
from bench.overhead.targets import cli_with

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

# The audit outcomes written by the begins' task, between begins, on their connection (as before
# they had a connection and a task of their own): a begin then waits behind an outcome batch.
_OUTCOMES_INLINE = _PATCH_STORES.format(body="    stores.audit.outcomes_pg = stores.audit.pg")

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


# Every request's clean-up in a task of its own, as before a whole answer's ran inline once its
# audit record was committed (undoes a change made in src/).
_CLOSE_IN_TASK = """
import asyncio as _mr_asyncio
from mindrouter.pipeline import flight as _mr_flight
async def _mr_close(self):
    task = _mr_asyncio.ensure_future(self._closing())
    _mr_flight._CLOSING.add(task)
    task.add_done_callback(_mr_flight._CLOSING.discard)
    await _mr_asyncio.shield(task)
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
    "close-in-task": _CLOSE_IN_TASK,
    "unary-upstream": _UNARY_UPSTREAM,
    "console-off": _CONSOLE_OFF,
    "gc-unfrozen": _GC_UNFROZEN,
    "gc-stats": GC_STATS,
    "gc-unfrozen-stats": _GC_UNFROZEN + GC_STATS,
    "cprofile": CPROFILE,
    "stalls": STALLS,
    "stages": STAGES,
    "cycles": CYCLES,
    "timers": TIMERS,
    "head-with-body": _HEAD_WITH_BODY,
    "outcomes-inline": _OUTCOMES_INLINE,
}


def launcher(variant: str) -> list[str] | None:
    """argv that starts `mindrouter` with the variant applied, or None for the plain CLI."""
    prelude = VARIANTS[variant]
    if not prelude:
        return None
    return cli_with(prelude)
