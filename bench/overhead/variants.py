"""Candidate hot-path changes, applied from outside the source tree to measure them first.

Each variant is Python run before `mindrouter.cli.main`, in the gateway's own process: it swaps
the event loop, wraps `build_app` to adjust the finished app, or puts a package on the path.
The changes mirror what a one- or two-line edit to src/ would do; the comparison runs every
variant side by side, interleaved, at the same rate.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

OVERLAY = Path.home() / ".cache" / "mindrouter" / "overlay"

# Wraps build_app; `{body}` adjusts `app` (a FastAPI instance) before it is served.
_PATCH_APP = """
import mindrouter.app as _mr_app
_mr_build = _mr_app.build_app
def _mr_patched(settings, stores=None):
    app = _mr_build(settings, stores)
{body}
    return app
_mr_app.build_app = _mr_patched
"""

# FastAPI's built-in OpenTelemetry bridge asks the global providers, through os.environ, on
# every request whether anything is configured; turning its three switches off skips that.
_NO_OTEL = "    app._telemetry.update(tracing=False, metrics=False, logs=False)"

# The router tries routes in order; the admin and usage routes come before the OpenAI ones.
_HOT_FIRST = """    hot = ('/v1/chat/completions', '/v1/completions', '/v1/embeddings')
    first = [r for r in app.router.routes if getattr(r, 'path', None) in hot]
    app.router.routes[:] = first + [r for r in app.router.routes if r not in first]"""

# The hot route straight under Starlette's router, without FastAPI's own middleware (body-size
# limit, exception telemetry, the dependency exit stack) and its telemetry check; the admin
# API stays under FastAPI, reached when the hot paths do not match.
_STARLETTE_FRONT = """    from starlette.applications import Starlette as _S
    inner = app
    hot = ('/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/anthropic/v1/messages')
    routes = [r for r in inner.router.routes if getattr(r, 'path', None) in hot]
    front = _S(routes=routes, exception_handlers=inner.exception_handlers)
    front.state = inner.state
    async def _dispatch(scope, receive, send):
        if scope['type'] == 'http' and scope['path'] in hot:
            await front(scope, receive, send)
        else:
            await inner(scope, receive, send)
    class _App:
        state = inner.state
        router = inner.router
        async def __call__(self, scope, receive, send):
            await _dispatch(scope, receive, send)
    app = _App()"""

# A pool with pre-ping runs a BEGIN + ROLLBACK round trip pair on asyncpg before every checkout;
# the audit writer checks out a connection for every batch.
_NO_PREPING = """
import mindrouter.stores.sql.engine as _mr_engine
_mr_cae = _mr_engine.create_async_engine
def _mr_no_ping(url, **kw):
    kw.pop('pool_pre_ping', None)
    return _mr_cae(url, **kw)
_mr_engine.create_async_engine = _mr_no_ping
"""

# Audit outcomes are only queued by the request; the writer still commits them in their own
# transaction as soon as no begin is waiting, about one per request at moderate rates. Here they
# wait until 50 ms after the oldest was queued (or 500 are queued), then go as one batch.
_LAZY_COMPLETE = """
import asyncio as _mr_asyncio
from mindrouter.stores.sql import audit_writer as _mr_aw
_mr_kick = _mr_aw.AuditWriter._kick
def _mr_kick_and_wake(self):
    wake = getattr(self, '_mr_wake', None)
    if wake is not None:
        wake.set()
    _mr_kick(self)
def _mr_complete(self, uuid, outcome):
    if not self._completions:
        self._mr_since = _mr_asyncio.get_running_loop().time()
    self._completions.append(_mr_aw.outcome_values(uuid, outcome))
    if self._drain is None or self._drain.done():
        self._drain = _mr_asyncio.create_task(self._run(), name='audit-writer')
async def _mr_run(self):
    loop = _mr_asyncio.get_running_loop()
    try:
        while self._begins or self._completions:
            if self._begins:
                await self._write_begins()
                continue
            due = getattr(self, '_mr_since', 0.0) + 0.05
            if len(self._completions) < self.max_batch and loop.time() < due:
                # A begin must never wait for this pause: it wakes the writer at once.
                self._mr_wake = wake = _mr_asyncio.Event()
                try:
                    await _mr_asyncio.wait_for(wake.wait(), due - loop.time())
                except TimeoutError:
                    pass
                self._mr_wake = None
                continue
            await self._write_completions()
            self._mr_since = loop.time()
    except BaseException as exc:
        pending, self._begins = self._begins, []
        for _, future in pending:
            self._settle(future, _mr_aw.InternalError('the audit writer stopped'))
        if isinstance(exc, Exception):
            return
        raise
_mr_aw.AuditWriter._kick = _mr_kick_and_wake
_mr_aw.AuditWriter.complete = _mr_complete
_mr_aw.AuditWriter._run = _mr_run
"""

# The request waits for its clean-up (slot, audit outcome queued, limits settled in Redis)
# before its response goes out; here the clean-up runs on after the response.
_CLOSE_BEHIND = """
import asyncio as _mr_asyncio
from mindrouter.pipeline import flight as _mr_flight
async def _mr_close(self, status, usage, output, error):
    if self._closed:
        return
    self._closed = True
    task = _mr_asyncio.ensure_future(self._close(status, usage, output, error))
    _mr_flight._CLOSING.add(task)
    task.add_done_callback(_mr_flight._CLOSING.discard)
_mr_flight.Flight.close = _mr_close
"""

_UVLOOP = "import uvloop; uvloop.install()"
_HIREDIS = f"import sys; sys.path.insert(0, {str(OVERLAY)!r})"


def _patch(*bodies: str) -> str:
    return _PATCH_APP.format(body="\n".join(bodies))


VARIANTS: dict[str, str] = {
    "default": "",
    "uvloop": _UVLOOP,
    "no-otel": _patch(_NO_OTEL),
    "hot-routes-first": _patch(_HOT_FIRST),
    "starlette-front": _patch(_STARLETTE_FRONT),
    "hiredis": _HIREDIS,
    "no-preping": _NO_PREPING,
    "audit-lazy-complete": _LAZY_COMPLETE,
    "close-behind": _CLOSE_BEHIND,
    "combined": "\n".join(
        (_UVLOOP, _HIREDIS, _NO_PREPING, _LAZY_COMPLETE, _patch(_NO_OTEL, _HOT_FIRST))
    ),
}


def ensure_overlay() -> None:
    """hiredis (redis-py's C reply parser) in a directory of its own, never in the project's
    environment: only the variant that asks for it puts it on its path."""
    if (OVERLAY / "hiredis").is_dir():
        return
    pip = Path(sys.base_prefix) / "bin" / "pip3"
    subprocess.run(
        [str(pip), "install", "--quiet", "--target", str(OVERLAY), "hiredis"], check=True
    )


def launcher(variant: str) -> list[str] | None:
    """argv that starts `mindrouter` with the variant applied, or None for the plain CLI."""
    prelude = VARIANTS[variant]
    if not prelude:
        return None
    if "hiredis" in variant or variant == "combined":
        ensure_overlay()
    code = f"{prelude}\nimport sys\nfrom mindrouter.cli import main\nsys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", code]
