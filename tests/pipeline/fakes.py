"""What the in-process pipeline tests put where the gateway meets the world: a clock the test
moves forward, and engine adapters that answer from a script.

`Clock` runs with real monotonic time and jumps ahead when the test calls `advance`: what the
gateway measures on it (breaker cooldowns, the queue, latencies) stays consistent with the
request contexts' own timestamps, and a cooldown passes without waiting for it.

`FakeEngine` implements the engine adapter port (`backends/base.py`) for generations: every
call is recorded (`calls`), and a test decides how the next calls go (`fail_next`, `failing`,
`drop_after`, `hold_at`) and when a held call may go on (`release`). A stream closed early
(the client left, the gateway gave up) is recorded as `cancelled`, which is how a real adapter
closes the engine's connection.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from mindrouter.canonical import (
    ChatRequest,
    ChatResult,
    CompletionRequest,
    EmbeddingRequest,
    EmbeddingResult,
    Events,
    EventSink,
    RelevanceRequest,
    RelevanceResult,
)
from mindrouter.canonical.events import Done, Finish, TextDelta
from mindrouter.canonical.response import Usage
from mindrouter.errors import UpstreamError, UpstreamUnavailable


class Clock:
    """Monotonic seconds, plus whatever the test skipped."""

    def __init__(self) -> None:
        self.skipped = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.skipped

    def advance(self, seconds: float) -> None:
        self.skipped += seconds


@dataclass
class EngineCall:
    request: ChatRequest | CompletionRequest
    alongside: int = 0  # the engine's other calls still running when this one arrived
    sent: int = 0  # output tokens yielded so far
    outcome: str = "running"  # then "done", "failed", "dropped" or "cancelled"


def refused(name: str) -> UpstreamUnavailable:
    """What the adapter raises for a connection the engine's host refused."""
    return UpstreamUnavailable(f"{name}: cannot connect (Connect call failed)", name)


def server_error(name: str, status: int = 500) -> UpstreamUnavailable:
    return UpstreamUnavailable(f"{name}: HTTP {status}: simulated failure", name, status)


@dataclass
class FakeEngine:
    name: str
    tokens: int = 4  # output tokens of a generation, one per text chunk
    input_tokens: int = 9  # what the engine says the prompt was
    reported_output: int | None = None  # what it says it generated, if not `tokens`
    failing: Callable[[], UpstreamError] | None = None  # every call fails before its first event
    drop_after: int | None = None  # the stream breaks after this many tokens
    hold_at: int | None = None  # the stream pauses before this token until `release()`
    healthy: bool = True  # what its health checks answer
    engine: str = "vllm"
    calls: list[EngineCall] = field(default_factory=list)
    _script: deque[UpstreamError | None] = field(default_factory=deque)
    _released: asyncio.Event = field(default_factory=asyncio.Event)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://{self.name}.invalid"

    @property
    def seen(self) -> int:
        return len(self.calls)

    def fail_next(self, *errors: UpstreamError | None) -> None:
        """The next calls, in order: each raises its error before its first event (None: it
        goes as configured)."""
        self._script.extend(errors)

    def release(self) -> None:
        """Held streams go on (and later ones do not pause)."""
        self._released.set()

    async def reached(self, calls: int, tokens: int = 0) -> EngineCall:
        """Waits until call number `calls` (1-based) has arrived and sent `tokens` tokens."""
        while not (len(self.calls) >= calls and self.calls[calls - 1].sent >= tokens):
            self._changed.clear()
            await self._changed.wait()
        return self.calls[calls - 1]

    def _note(self) -> None:
        self._changed.set()

    # -- the adapter port ----------------------------------------------------------------------

    def chat_stream(self, req: ChatRequest) -> Events:
        return self._generate(req)

    def complete_stream(self, req: CompletionRequest) -> Events:
        return self._generate(req)

    async def _generate(self, req: ChatRequest | CompletionRequest) -> Events:
        running = sum(1 for c in self.calls if c.outcome == "running")
        call = EngineCall(req, alongside=running)
        self.calls.append(call)
        self._note()
        scripted = self._script.popleft() if self._script else None
        try:
            await asyncio.sleep(0)  # the request is on its way, as over a connection
            error = scripted or (self.failing() if self.failing is not None else None)
            if error is not None:
                call.outcome = "failed"
                raise error
            # A sink sent in (`canonical.Events`) is handed the events that follow, one read of
            # the engine each, until it wants no more: as an adapter pushes them.
            sink: EventSink | None = None
            for i in range(self.tokens):
                if i == self.hold_at:
                    await self._released.wait()
                if i == self.drop_after:
                    call.outcome = "dropped"
                    raise UpstreamUnavailable(
                        f"{self.name}: connection dropped while streaming", self.name
                    )
                event = TextDelta(f"w{i} ")
                if sink is None:
                    sink = yield event
                else:
                    await asyncio.sleep(0)  # the next read of the engine's socket
                    if not sink([event]):
                        sink = None
                call.sent += 1
                self._note()
            yield Finish("stop")
            output = self.tokens if self.reported_output is None else self.reported_output
            yield Done(Usage(input_tokens=self.input_tokens, output_tokens=output))
            call.outcome = "done"
        except (GeneratorExit, asyncio.CancelledError):
            call.outcome = "cancelled"
            raise
        finally:
            self._note()

    async def chat(self, req: ChatRequest) -> ChatResult:
        raise NotImplementedError("the pipeline reads every generation from a stream")

    async def complete(self, req: CompletionRequest) -> ChatResult:
        raise NotImplementedError("the pipeline reads every generation from a stream")

    async def embed(self, req: EmbeddingRequest) -> EmbeddingResult:
        raise NotImplementedError

    async def score(self, req: RelevanceRequest) -> RelevanceResult:
        raise NotImplementedError

    async def count_chat_tokens(self, req: ChatRequest) -> int | None:
        return None

    async def aclose(self) -> None:
        pass
