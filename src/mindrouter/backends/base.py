"""The port every engine adapter implements, and the settings it is built from.

An adapter turns canonical requests into one engine's wire format, sends them over a pooled HTTP
connection and turns the answers back into canonical results or events. It raises only
`mindrouter.errors` types, translated once here at the edge where the foreign errors arise:

- `UpstreamUnavailable`  connection refused/reset/dropped (also mid-stream), or a 5xx, 429 or 503
                         (`status` set when there was one);
- `UpstreamTimeout`      connect, first-byte or total time exceeded;
- `ContextLengthExceeded` the engine said the input does not fit;
- `ModelNotFound`        the engine does not serve the model;
- `UpstreamRejected`     any other 4xx, with the engine's own message and status.

Streams end with exactly one `Done(usage)`; failures are raised, never yielded, so the caller
knows whether anything reached its client. A stream pushes its events to a sink sent in with
`asend` (`canonical.Events`) until that sink wants no more or its engine's stream ends or
fails. Closing the iterator early (`aclose()`) closes the upstream connection at once, which is
how an engine learns that the client went away.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from mindrouter.canonical import (
    ChatRequest,
    ChatResult,
    CompletionRequest,
    EmbeddingRequest,
    EmbeddingResult,
    Events,
    RelevanceRequest,
    RelevanceResult,
)
from mindrouter.routing.backend_config import Engine


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds. `idle` bounds the silence between two pieces of a stream, never its length;
    `total` bounds a call answered in one body (embeddings, token counts)."""

    connect: float = 10.0
    first_byte: float = 60.0
    total: float = 180.0
    idle: float = 60.0


class EngineAdapter(Protocol):
    engine: Engine
    url: str

    async def chat(self, req: ChatRequest) -> ChatResult: ...

    def chat_stream(self, req: ChatRequest) -> Events: ...

    async def complete(self, req: CompletionRequest) -> ChatResult: ...

    def complete_stream(self, req: CompletionRequest) -> Events: ...

    async def embed(self, req: EmbeddingRequest) -> EmbeddingResult: ...

    async def score(self, req: RelevanceRequest) -> RelevanceResult:
        """One relevance score per document (rerank and score); only engines with the rerank
        feature are asked."""
        ...

    async def count_chat_tokens(self, req: ChatRequest) -> int | None:
        """The engine's own count of the rendered prompt, or None when it has no tokenizer."""
        ...

    async def aclose(self) -> None: ...
