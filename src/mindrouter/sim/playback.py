"""Play a planned reply back over HTTP the way an engine would: slot, TTFT, paced tokens, faults.

`GenerationResponse` is a raw ASGI response so that it can watch the receive channel for
`http.disconnect` while it generates. A client that goes away is noticed at once (not on the
next write), generation stops, the slot is released and the record gets `cancelled_at` with the
tokens generated so far.

Each token is sent as soon as it is generated: one `send` per token, no buffering. With
`drop_after = N` a stream is cut after N chunks: the response is left incomplete and uvicorn
closes the connection, so the client sees a truncated chunked body and no terminator.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from starlette.types import Receive, Scope, Send

from mindrouter.sim.engine import RequestRecord, SimState
from mindrouter.sim.text import ChoicePlan, Step


@dataclass
class Timing:
    received_at: float
    started_at: float
    first_token_at: float
    finished_at: float
    prompt_tokens: int
    completion_tokens: int

    @property
    def queue_s(self) -> float:
        return max(0.0, self.started_at - self.received_at)

    @property
    def prefill_s(self) -> float:
        return max(0.0, self.first_token_at - self.started_at)

    @property
    def decode_s(self) -> float:
        return max(0.0, self.finished_at - self.first_token_at)

    @property
    def total_s(self) -> float:
        return max(0.0, self.finished_at - self.received_at)


class Encoder:
    """Turns a played-back reply into an engine's wire format.

    Stream methods return the chunks to send (each one counts for `drop_after`); `body` is the
    whole non-streamed response.
    """

    stream_media_type = "text/event-stream; charset=utf-8"
    body_media_type = "application/json"

    def begin(self) -> list[bytes]:
        return []

    def step(self, plan: ChoicePlan, step: Step, generated: int) -> list[bytes]:
        return []

    def end_choice(self, plan: ChoicePlan, generated: int) -> list[bytes]:
        return []

    def end(self, timing: Timing) -> list[bytes]:
        return []

    def body(self, timing: Timing) -> bytes:
        raise NotImplementedError


@dataclass
class Job:
    record: RequestRecord
    plans: Sequence[ChoicePlan]
    encoder: Encoder
    stream: bool
    headers_early: bool = False
    on_finish: Callable[[], None] | None = None


async def _wait_disconnect(receive: Receive) -> float:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return time.monotonic()


class HangResponse:
    """Accept the request and never answer; return once the client has gone."""

    def __init__(self, state: SimState, record: RequestRecord) -> None:
        self.state = state
        self.record = record
        record.fault = "hang"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = await _wait_disconnect(receive)
        self.record.cancelled_at = gone
        self.record.finished_at = gone
        self.state.cancelled_total += 1


class GenerationResponse:
    def __init__(self, state: SimState, job: Job) -> None:
        self.state = state
        self.job = job
        job.record.stream = job.stream
        self._completing = False
        self._released = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watcher = asyncio.ensure_future(_wait_disconnect(receive))
        worker = asyncio.ensure_future(self._work(send))
        try:
            await asyncio.wait((watcher, worker), return_when=asyncio.FIRST_COMPLETED)
            if worker.done() or self._completing:
                await worker
                return
            record = self.job.record
            record.cancelled_at = watcher.result()
            self.state.cancelled_total += 1
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        finally:
            watcher.cancel()
            worker.cancel()

    async def _start(self, send: Send, media_type: str, length: int | None = None) -> None:
        headers = [(b"content-type", media_type.encode())]
        if length is not None:
            headers.append((b"content-length", str(length).encode()))
        else:
            headers.append((b"cache-control", b"no-cache"))
        self.job.record.status = 200
        await send({"type": "http.response.start", "status": 200, "headers": headers})

    async def _work(self, send: Send) -> None:
        state, job = self.state, self.job
        record, encoder = job.record, job.encoder
        model = record.model or ""
        if job.stream and job.headers_early:
            await self._start(send, encoder.stream_media_type)
        state.waiting_by_model[model] += 1
        try:
            await state.slots.acquire()
        finally:
            state.waiting_by_model[model] -= 1
        try:
            await self._generate(send)
        finally:
            self._release()

    def _release(self) -> None:
        """End the engine's work on this request: free the slot once, on whichever path."""
        if self._released:
            return
        self._released = True
        state, job = self.state, self.job
        state.active.pop(job.record.id, None)
        state.slots.release()
        job.record.finished_at = time.monotonic()
        if job.on_finish is not None:
            job.on_finish()

    async def _generate(self, send: Send) -> None:
        state, job = self.state, self.job
        record, encoder, config = job.record, job.encoder, state.config
        record.started_at = time.monotonic()
        state.active[record.id] = record
        model = record.model or ""
        state.prompt_tokens_total += record.prompt_tokens
        state.prompt_tokens_by_model[model] += record.prompt_tokens
        tokens_per_second = config.tokens_per_second
        if config.ttft_ms > 0:
            await asyncio.sleep(config.ttft_ms / 1000)
        first_token_at = time.monotonic()
        out = _Emitter(
            send,
            record,
            limit=config.drop_after if job.stream else None,
            stall=config.stall_after if job.stream else None,
        )
        if job.stream:
            if not job.headers_early:
                await self._start(send, encoder.stream_media_type)
            if not await out.emit(encoder.begin()):
                return
        generated = await self._play(out, first_token_at, tokens_per_second)
        if generated is None:
            return
        # Generation is over: like an engine, free the slot before the last bytes are written.
        self._release()
        timing = Timing(
            received_at=record.received_at,
            started_at=record.started_at or first_token_at,
            first_token_at=record.first_token_at or first_token_at,
            finished_at=record.finished_at or time.monotonic(),
            prompt_tokens=record.prompt_tokens,
            completion_tokens=generated,
        )
        if job.stream:
            await self._end_stream(out, timing)
            return
        body = encoder.body(timing)
        self._completing = True
        await self._start(send, encoder.body_media_type, len(body))
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _play(
        self, out: _Emitter, first_token_at: float, tokens_per_second: float
    ) -> int | None:
        """Generates the planned tokens, paced; how many, or None if a fault cut the stream."""
        state, job = self.state, self.job
        record, encoder = job.record, job.encoder
        model = record.model or ""
        generated = 0
        for plan in job.plans:
            for step in plan.steps:
                if tokens_per_second > 0 and generated:
                    delay = first_token_at + generated / tokens_per_second - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                generated += 1
                now = time.monotonic()
                record.token_generated(now)
                state.generation_tokens_total += 1
                state.generation_tokens_by_model[model] += 1
                if generated == 1:
                    record.first_token_at = now
                if job.stream and not await out.emit(encoder.step(plan, step, generated)):
                    return None
            record.finish_reason = plan.finish
            state.finished_by_reason[plan.finish] += 1
            if job.stream and not await out.emit(encoder.end_choice(plan, generated)):
                return None
        return generated

    async def _end_stream(self, out: _Emitter, timing: Timing) -> None:
        closing = self.job.encoder.end(timing)
        if not await out.emit(closing[:-1]):
            return
        if closing and out.limit is not None and out.sent + 1 > out.limit:
            self.job.record.fault = "drop"
            return
        self._completing = True
        last = closing[-1] if closing else b""
        await out.send({"type": "http.response.body", "body": last, "more_body": False})


class _Emitter:
    """Sends a stream's chunks, applying its faults: cut after `limit` chunks, or fall silent
    after `stall` with the connection left open."""

    def __init__(
        self, send: Send, record: RequestRecord, *, limit: int | None, stall: int | None
    ) -> None:
        self.send = send
        self.record = record
        self.limit = limit
        self.stall = stall
        self.sent = 0

    async def emit(self, chunks: list[bytes]) -> bool:
        """False once the stream has been cut."""
        if self.stall is not None and self.sent + len(chunks) > self.stall:
            # Silence with the connection open, until the client gives up on it.
            await self._cut(chunks, self.stall - self.sent, "stall")
            await asyncio.get_running_loop().create_future()
        if self.limit is not None and self.sent + len(chunks) > self.limit:
            await self._cut(chunks, self.limit - self.sent, "drop")
            return False
        self.sent += len(chunks)
        if chunks:
            await self.send(
                {"type": "http.response.body", "body": b"".join(chunks), "more_body": True}
            )
        return True

    async def _cut(self, chunks: list[bytes], keep: int, fault: str) -> None:
        kept = chunks[: max(0, keep)]
        if kept:
            await self.send(
                {"type": "http.response.body", "body": b"".join(kept), "more_body": True}
            )
        self.record.fault = fault
