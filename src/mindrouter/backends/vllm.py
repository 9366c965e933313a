"""vLLM's OpenAI server: the OpenAI wire plus vLLM's sampling and reasoning extras.

Configured URL: the server root, with or without a trailing `/v1` (`/tokenize` and `/score` live
at the root). Rerank and score both go to `/score`, which takes every pair in one call.
"""

from __future__ import annotations

from typing import Any, ClassVar

from mindrouter.backends.openai_compat import OpenAICompatAdapter, raise_unless_missing
from mindrouter.backends.openai_wire import VLLM, Flavor, encode_chat
from mindrouter.backends.relevance_wire import decode_score, encode_score, relevance_result
from mindrouter.canonical import ChatRequest, RelevanceRequest, RelevanceResult
from mindrouter.errors import UpstreamRejected
from mindrouter.routing.backend_config import Engine
from mindrouter.tokens import estimate_relevance_input

Json = dict[str, Any]


def encode_tokenize(req: ChatRequest) -> Json:
    """The chat form of `/tokenize`: the same messages, tools and template switches as the call."""
    chat = encode_chat(req, VLLM, stream=False)
    body: Json = {"model": req.model, "messages": chat["messages"], "add_generation_prompt": True}
    if "tools" in chat:
        body["tools"] = chat["tools"]
    if "chat_template_kwargs" in chat:
        body["chat_template_kwargs"] = chat["chat_template_kwargs"]
    return body


class VLLMAdapter(OpenAICompatAdapter):
    engine: Engine = "vllm"
    flavor: ClassVar[Flavor] = VLLM

    async def count_chat_tokens(self, req: ChatRequest) -> int | None:
        try:
            data = await self.http.post_json("/tokenize", encode_tokenize(req), req.model)
        except UpstreamRejected as exc:
            raise_unless_missing(exc)
            return None
        count = data.get("count")
        if isinstance(count, int):
            return count
        tokens = data.get("tokens")
        return len(tokens) if isinstance(tokens, list) else None

    async def score(self, req: RelevanceRequest) -> RelevanceResult:
        data = await self.http.post_json("/score", encode_score(req, req.extra), req.model)
        scores, tokens = decode_score(data, len(req.documents), self.name)
        return relevance_result(req, scores, tokens, lambda: estimate_relevance_input(req))
