"""Canonical stream events: what a backend produces while generating, in order.

A stream is any number of deltas, a `Finish` per choice, then exactly one terminal event:
`Done` (with the usage) or `StreamFailed`. Tool calls are bracketed by `ToolCallStart` and
`ToolCallEnd`, with their argument JSON arriving as fragments in between; boundaries fall anywhere.
"""

from __future__ import annotations

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
