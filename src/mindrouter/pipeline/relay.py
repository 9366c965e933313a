"""Stage 11: a generation's engine stream read through to the client, whole or event by event.

Every generation is read from an engine stream, and every attempt starts the same way: connect
and wait for the first event (`first_of`). A stream waits for it before anything is sent to the
client, so a failure up to that point can still be retried on another backend or reported with a
status; a non-streamed answer is the same stream collected whole within the attempt
(`collector`), so it fails over until its end. Either way, a request that ends early (the client
left, the engine broke off) is charged what was generated: each event is tallied on the flight.
A stream's flight scope runs from the dispatch to the end of the relay (`stream`); the dialect
encodes each event for the client as it comes (`http/`, `dialects/`).

Past the first event, both have the engine's events pushed to them (`canonical.Events`): decoded,
tallied and (for a stream) encoded and written to the client inside the engine connection's
callback, with no task woken per chunk. The task takes over for what needs waiting: the end,
a failure, a client that reads more slowly than the engine writes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from mindrouter.backends.base import EngineAdapter
from mindrouter.canonical import (
    ChatAssembler,
    ChatResult,
    Done,
    Events,
    EventSink,
    GenerationRequest,
    StreamEvent,
    StreamFailed,
)
from mindrouter.errors import (
    InternalError,
    MindRouterError,
    Overloaded,
    UpstreamError,
    UpstreamUnavailable,
)
from mindrouter.observability.logging import log
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.dispatch import Dispatcher
from mindrouter.pipeline.flight import Flight, open_flight
from mindrouter.pipeline.services import Services
from mindrouter.routing.catalog import ModelSpec

G = TypeVar("G", bound=GenerationRequest)
Opener = Callable[[EngineAdapter, G], Events]
FirstOf = Callable[[EngineAdapter, G], Awaitable[tuple[StreamEvent, Events]]]


def _first_event(s: Services, flight: Flight) -> None:
    ctx = flight.ctx
    ctx.first_token_at = s.clock()
    if flight.backend is not None:
        flight.backend.observe_ttft(ctx.first_token_at - ctx.attempt_started_at)


def _observe_speed(s: Services, flight: Flight) -> None:
    """A generation finished: the backend's time per output token after the first one."""
    backend, first, usage = flight.backend, flight.ctx.first_token_at, flight.tally.usage
    if backend is None or first is None or usage is None or usage.output_tokens < 2:
        return
    backend.observe_tpot((s.clock() - first) / (usage.output_tokens - 1))


def first_of(s: Services, flight: Flight, opener: Opener[G]) -> FirstOf[G]:
    """The attempt of a generation: the engine's stream, up to its first event."""

    async def attempt(adapter: EngineAdapter, r: G) -> tuple[StreamEvent, Events]:
        events = opener(adapter, r)
        try:
            first = await anext(events)
        except StopAsyncIteration:
            raise UpstreamUnavailable(
                "the backend sent an empty stream", flight.ctx.backend
            ) from None
        except BaseException:
            await events.aclose()
            raise
        # The backend answered: that is what the breaker wants to know.
        _first_event(s, flight)
        return first, events

    return attempt


def collector(
    s: Services, flight: Flight, model: str, opener: Opener[G]
) -> Callable[[EngineAdapter, G], Awaitable[ChatResult]]:
    """The attempt of a non-streamed generation: the engine's stream, read whole; the answer
    names `model` as the client asked for it."""
    attempt = first_of(s, flight, opener)

    async def collect(adapter: EngineAdapter, r: G) -> ChatResult:
        assembler = ChatAssembler(model)
        see, feed = flight.see, assembler.feed

        def take(batch: list[StreamEvent]) -> bool:
            see(batch)
            for event in batch:
                feed(event)
            return True

        event, events = await attempt(adapter, r)
        try:
            while True:
                see((event,))
                feed(event)
                try:
                    event = await events.asend(take)
                except StopAsyncIteration:
                    break
        finally:
            await events.aclose()
        if assembler.usage is None:
            raise UpstreamUnavailable("the backend sent an empty stream", flight.ctx.backend)
        _observe_speed(s, flight)
        return assembler.result()

    return collect


def _tallied(s: Services, flight: Flight, sink: EventSink) -> EventSink:
    """`sink` behind the flight's tally; it wants no more once the gateway's grace period for
    open streams is over (the relay then ends the stream)."""
    see, draining = flight.see, s.draining

    def push(batch: list[StreamEvent]) -> bool:
        see(batch)
        return sink(batch) and not draining()

    return push


async def stream(
    s: Services,
    dispatch: Dispatcher,
    ctx: RequestContext,
    req: G,
    spec: ModelSpec,
    *,
    opener: Opener[G],
) -> Events:
    """A streamed request in its flight's scope: the dispatch, then the relay. It yields the
    first event twice: once to the caller that opens the stream, which only waits for it, then
    to the client. The last event (the ending, or the failure) comes after the flight's
    clean-up, so that a client sending its next request as soon as it reads the end finds its
    concurrent request given back and its tokens settled."""
    last: StreamEvent | None = None
    async with open_flight(s, ctx, req, spec) as flight:
        event, events = await dispatch.run(flight, req, first_of(s, flight, opener))
        push: EventSink | None = None  # the client's sink, behind the flight's tally
        try:
            # Tallied before the opener has it: the response may fail before it asks for more.
            flight.see((event,))
            yield event
            while True:
                if isinstance(event, Done):  # the engine's last event: its stream ends next
                    flight.end("ok")
                    _observe_speed(s, flight)
                    last = event
                else:
                    sink = yield event
                    if s.draining():
                        raise Overloaded(
                            "the gateway is shutting down and its grace period for open "
                            "streams is over; retry the request"
                        )
                    # Made again for every event pulled: those are few once pushing starts.
                    push = None if sink is None else _tallied(s, flight, sink)
                try:
                    event = await events.asend(push)
                except StopAsyncIteration:
                    break
                flight.see((event,))
        except MindRouterError as exc:
            flight.end("error", exc)
            if isinstance(exc, UpstreamError) and flight.backend is not None:
                dispatch.attempt_failed(flight.backend, exc)
            last = StreamFailed(exc)
        except Exception as exc:
            log.exception("stream relay failed", backend=flight.ctx.backend)
            error = InternalError(f"the stream failed inside the gateway: {exc}")
            flight.end("error", error)
            last = StreamFailed(error)
        finally:
            await events.aclose()
    if last is not None:
        yield last
