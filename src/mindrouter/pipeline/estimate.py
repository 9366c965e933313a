"""Stage 4: how many tokens a request is expected to read and to write.

The estimates are what the limits reserve (`admit.py`), what the fair queue orders by
(`schedule.py`) and where fitting to the context starts (`fit.py`); the engine's own usage
replaces them once the request has run.
"""

from __future__ import annotations

import asyncio

from mindrouter.canonical import AnyRequest, ChatRequest, CompletionRequest, EmbeddingRequest
from mindrouter.pipeline.fit import estimate_limit, refuse_far_over
from mindrouter.routing.catalog import ModelSpec
from mindrouter.tokens import (
    estimate_chat_input,
    estimate_completion_input,
    estimate_embedding_input,
    estimate_relevance_input,
)

# What a request is assumed to generate when it does not say (for reservations and the queue).
DEFAULT_OUTPUT_ESTIMATE = 512

# Above this many characters of text, counting the input's tokens (about 12 ms per 100 KB here)
# runs in a worker thread, where tiktoken releases the GIL, instead of holding up the event loop.
OFF_LOOP_CHARS = 32_768


def estimate_input(req: AnyRequest, limit: int | None = None) -> int:
    """The input estimate; chat and completion counting stops past `limit` (fit.py)."""
    if isinstance(req, ChatRequest):
        return estimate_chat_input(req, limit)
    if isinstance(req, CompletionRequest):
        return estimate_completion_input(req, limit)
    if isinstance(req, EmbeddingRequest):
        return estimate_embedding_input(req)
    return estimate_relevance_input(req)


def text_size(req: AnyRequest) -> int:
    """Roughly how many characters the estimate has to tokenize (cheap to compute)."""
    if isinstance(req, ChatRequest):
        size = sum(len(m.text()) + len(m.reasoning or "") for m in req.messages)
        size += sum(len(c.arguments) for m in req.messages for c in m.tool_calls)
        return size + sum(len(t.description or "") + len(repr(t.parameters)) for t in req.tools)
    if isinstance(req, CompletionRequest):
        return sum(len(p) for p in req.prompt)
    if isinstance(req, EmbeddingRequest):
        return sum(len(i) for i in req.inputs if isinstance(i, str))
    return sum(len(q) for q in req.queries) + sum(len(d) for d in req.documents)


async def estimate_input_off_loop(req: AnyRequest, limit: int | None = None) -> int:
    if text_size(req) < OFF_LOOP_CHARS:
        return estimate_input(req, limit)
    return await asyncio.to_thread(estimate_input, req, limit)


async def estimate_request_input(req: AnyRequest, spec: ModelSpec) -> int:
    """The input estimate of a request for `spec`; a generation far over the model's context is
    refused here, and counting it stops there."""
    if isinstance(req, ChatRequest | CompletionRequest):
        estimate = await estimate_input_off_loop(req, estimate_limit(spec))
        refuse_far_over(spec, estimate)
        return estimate
    return await estimate_input_off_loop(req)


def estimate_output(req: AnyRequest) -> int:
    if isinstance(req, ChatRequest | CompletionRequest):
        requested = req.sampling.max_tokens
        return requested if requested is not None else DEFAULT_OUTPUT_ESTIMATE
    return 0
