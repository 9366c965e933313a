"""Canonical stream events: what a backend produces while generating, in order.

A stream is any number of deltas, a `Finish` per choice, then exactly one terminal event:
`Done` (with the usage) or `StreamFailed`. Tool calls are bracketed by `ToolCallStart` and
`ToolCallEnd`, with their argument JSON arriving as fragments in between; boundaries fall anywhere.

A stream is an async generator of events (`Events`) that can also push them. Pulled (`anext`,
`async for`, `asend(None)`), it yields every event. A consumer that instead sends an `EventSink`
in (`asend(sink)`) has the events that follow handed to the sink as they are decoded, in batches:
what is already read at once, within that `asend`, and then inside the engine connection's
callback, with no task woken per chunk; the next event the generator yields is the first one
the sink was not given: the terminal event, or one after the sink answered False (it takes
every batch it is given and answers whether it wants more). The sink may not keep the list it
is passed. A generator that cannot push ignores the sink and yields every event, so a consumer
handles what is yielded either way.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from mindrouter.canonical.response import FinishReason, Usage
from mindrouter.errors import MindRouterError


@dataclass(slots=True)
class ReasoningDelta:
    text: str
    choice: int = 0


@dataclass(slots=True)
class ReasoningSignature:
    signature: str
    choice: int = 0


@dataclass(slots=True)
class TextDelta:
    text: str
    choice: int = 0


@dataclass(slots=True)
class ToolCallStart:
    index: int
    id: str
    name: str
    choice: int = 0


@dataclass(slots=True)
class ToolCallArgs:
    index: int
    fragment: str
    choice: int = 0


@dataclass(slots=True)
class ToolCallEnd:
    index: int
    choice: int = 0


@dataclass(slots=True)
class Finish:
    reason: FinishReason
    stop_sequence: str | None = None
    choice: int = 0


@dataclass(slots=True)
class Done:
    usage: Usage


@dataclass(slots=True)
class StreamFailed:
    error: MindRouterError


StreamEvent = (
    ReasoningDelta
    | ReasoningSignature
    | TextDelta
    | ToolCallStart
    | ToolCallArgs
    | ToolCallEnd
    | Finish
    | Done
    | StreamFailed
)

EventSink = Callable[[list[StreamEvent]], bool]
Events = AsyncGenerator[StreamEvent, EventSink | None]
