"""Canonical results: usage, finished chat choices, embeddings and relevance scores."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mindrouter.canonical.content import ToolCall

FinishReason = Literal[
    "stop",  # end of sequence
    "stop_sequence",  # a requested stop string was hit (see stop_sequence)
    "length",  # the output limit was reached
    "tool_calls",  # the model called tools
    "content_filter",
    "context_exceeded",  # the model ran out of context window
    "error",  # generation broke off
]


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    # True when the backend gave no figures and these were counted or estimated by the gateway.
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(slots=True)
class Choice:
    index: int = 0
    text: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: FinishReason = "stop"
    stop_sequence: str | None = None


@dataclass(slots=True)
class ChatResult:
    model: str
    choices: list[Choice]
    usage: Usage

    @property
    def first(self) -> Choice:
        return self.choices[0]


@dataclass(slots=True)
class EmbeddingResult:
    model: str
    vectors: list[list[float]]
    usage: Usage


@dataclass(slots=True)
class RelevanceResult:
    """One score per document of a RelevanceRequest, in the request's document order."""

    model: str
    scores: list[float]
    usage: Usage


AnyResult = ChatResult | EmbeddingResult | RelevanceResult
