"""State shared by every simulated engine: request records, slots, fault dice, counters.

`SimState` lives on `app.state.sim`. Tests read `records` (one `RequestRecord` per inference
request, in arrival order) and may change `config` while the server runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import random
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp

from mindrouter.sim.config import SimConfig, SimModel

ErrorKind = Literal["invalid_request", "not_found", "context", "unsupported", "server"]
Fault = Literal["fail", "hang"]


class SimError(Exception):
    """A request the engine refuses; each engine renders it in its own error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: ErrorKind = "invalid_request",
        param: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.extra = extra or {}


LAST_TOKENS_KEPT = 16


@dataclass
class RequestRecord:
    id: int
    route: str
    model: str | None
    received_at: float
    stream: bool
    body: Any
    status: int | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    started_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    cancelled_at: float | None = None
    fault: str | None = None
    finish_reason: str | None = None
    # When the last few tokens were generated (time.monotonic()): whoever watches a client die
    # can tell the tokens generated before from those generated after.
    last_tokens_at: list[float] = dataclasses.field(default_factory=list)

    def token_generated(self, at: float) -> None:
        self.completion_tokens += 1
        times = self.last_tokens_at
        times.append(at)
        if len(times) > LAST_TOKENS_KEPT:
            del times[0]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class SlotPool:
    """At most `limit()` holders at once; the others wait in arrival order.

    The limit is read on every acquire and release, so changing `config.slots` on a running
    server takes effect as requests come and go.
    """

    def __init__(self, limit: Callable[[], int]) -> None:
        self._limit = limit
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> None:
        if self.running < self._limit() and not self._waiters:
            self.running += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # The slot was handed to us just as we were cancelled: pass it on.
                self.release()
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        self.running -= 1
        self._wake()

    def limit_changed(self) -> None:
        """Let waiters in at once when the limit was raised at run time."""
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.running < self._limit():
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.running += 1
                waiter.set_result(None)


@dataclass
class LoadedModel:
    """An Ollama model in memory: it stays listed by /api/ps until `expires_at` (wall clock)."""

    model: SimModel
    expires_at: float | None


class SimState:
    max_records = 10_000

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.records: list[RequestRecord] = []
        self.healthy = True
        self.started_wall = time.time()
        self.slots = SlotPool(lambda: max(1, self.config.slots))
        self.active: dict[int, RequestRecord] = {}
        self.waiting_by_model: Counter[str] = Counter()
        self.requests_total: Counter[tuple[str, str]] = Counter()
        self.finished_by_reason: Counter[str] = Counter()
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.prompt_tokens_by_model: Counter[str] = Counter()
        self.generation_tokens_by_model: Counter[str] = Counter()
        self.cancelled_total = 0
        self.loaded: dict[str, LoadedModel] = {}
        self._rng = random.Random(config.seed)
        self._ids = itertools.count(1)

    def new_record(self, route: str, body: Any) -> RequestRecord:
        model = body.get("model") if isinstance(body, dict) else None
        stream = body.get("stream") if isinstance(body, dict) else None
        record = RequestRecord(
            id=next(self._ids),
            route=route,
            model=model if isinstance(model, str) else None,
            received_at=time.monotonic(),
            stream=stream is True,
            body=body,
        )
        self.records.append(record)
        if len(self.records) > self.max_records:
            del self.records[: len(self.records) - self.max_records]
        return record

    def roll_fault(self) -> Fault | None:
        """Throw the fault dice with the rates configured right now."""
        config = self.config
        if config.fail_rate > 0 and self._rng.random() < config.fail_rate:
            return "fail"
        if config.hang_rate > 0 and self._rng.random() < config.hang_rate:
            return "hang"
        return None

    def running_by_model(self) -> Counter[str]:
        return Counter(record.model or "" for record in self.active.values())

    def mark_loaded(self, model: SimModel, keep_alive_s: float | None) -> None:
        expires = None if keep_alive_s is None else time.time() + keep_alive_s
        self.loaded[model.name] = LoadedModel(model, expires)

    def loaded_models(self) -> list[LoadedModel]:
        now = time.time()
        for name, entry in list(self.loaded.items()):
            if entry.expires_at is not None and entry.expires_at <= now:
                del self.loaded[name]
        return list(self.loaded.values())


def json_response(
    content: Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(orjson.dumps(content), status, headers, media_type="application/json")


async def read_json_object(request: Request) -> dict[str, Any]:
    """The body of a small non-inference request, which must be a JSON object."""
    raw = await request.body()
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as exc:
        raise SimError(400, f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise SimError(400, "the request body must be a JSON object")
    return body


ErrorRenderer = Callable[[SimError], Response]


async def handle_request(
    state: SimState,
    request: Request,
    route: str,
    handler: Callable[[Any, RequestRecord], ASGIApp],
    render_error: ErrorRenderer,
) -> ASGIApp:
    """Decode the JSON body, record the request, run `handler`; refusals use the engine's shape."""
    raw = await request.body()
    problem: SimError | None = None
    try:
        body = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError as exc:
        body, problem = None, SimError(400, f"invalid JSON body: {exc}")
    record = state.new_record(route, body)
    try:
        if problem is not None:
            raise problem
        return handler(body, record)
    except SimError as error:
        record.status = error.status
        record.finished_at = time.monotonic()
        return render_error(error)
