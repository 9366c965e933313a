"""The adapter shared by every engine that speaks OpenAI's wire format (vLLM, llama.cpp, any
OpenAI-compatible server). Subclasses choose the `Flavor`, the URL layout and token counting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from mindrouter.backends.base import Timeouts
from mindrouter.backends.failures import no_choices
from mindrouter.backends.http import DEFAULT_TIMEOUTS, Upstream
from mindrouter.backends.openai_results import decode_embeddings, decode_result
from mindrouter.backends.openai_stream import ChatStreamDecoder
from mindrouter.backends.openai_wire import (
    Flavor,
    encode_chat,
    encode_completion,
    encode_embedding,
)
from mindrouter.backends.relevance_wire import (
    decode_rerank,
    encode_rerank,
    query_groups,
    relevance_result,
)
from mindrouter.canonical import (
    ChatRequest,
    ChatResult,
    CompletionRequest,
    Done,
    EmbeddingRequest,
    EmbeddingResult,
    Events,
    RelevanceRequest,
    RelevanceResult,
    StreamEvent,
)
from mindrouter.errors import UpstreamRejected
from mindrouter.routing.backend_config import Engine
from mindrouter.tokens import (
    estimate_chat_input,
    estimate_completion_input,
    estimate_embedding_input,
    estimate_relevance_input,
)


def server_root(url: str) -> str:
    """The server root from a configured URL given with or without a trailing `/v1`."""
    root = url.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


def raise_unless_missing(exc: UpstreamRejected) -> None:
    """A server without the tokenizer route (an older build, a proxy) just has no count to give;
    any other rejection is a real answer and is raised."""
    if exc.status not in (404, 405):
        raise exc


class OpenAICompatAdapter:
    engine: Engine
    flavor: ClassVar[Flavor]

    def __init__(
        self,
        url: str,
        *,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        api_key: str | None = None,
        name: str | None = None,
    ) -> None:
        self.url = url
        self.name = name or url
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        root, self.api = self.layout(url)
        self.http = Upstream(root, timeouts=timeouts, backend=self.name, headers=headers)

    @staticmethod
    def layout(url: str) -> tuple[str, str]:
        """(server root, path prefix of the OpenAI routes). Engines serve them under `/v1`."""
        return server_root(url), "/v1"

    async def chat(self, req: ChatRequest) -> ChatResult:
        body = encode_chat(req, self.flavor, stream=False)
        data = await self.http.post_json(self.api + "/chat/completions", body, req.model)
        if not data.get("choices"):
            raise no_choices(self.name)
        return decode_result(
            data,
            req.model,
            lambda: estimate_chat_input(req),
            keep_reasoning=req.reasoning.return_reasoning,
        )

    def chat_stream(self, req: ChatRequest) -> Events:
        body = encode_chat(req, self.flavor, stream=True)
        decoder = ChatStreamDecoder(self.name, keep_reasoning=req.reasoning.return_reasoning)
        return self._stream(
            "/chat/completions", body, req.model, decoder, lambda: estimate_chat_input(req)
        )

    async def complete(self, req: CompletionRequest) -> ChatResult:
        body = encode_completion(req, self.flavor, stream=False)
        data = await self.http.post_json(self.api + "/completions", body, req.model)
        if not data.get("choices"):
            raise no_choices(self.name)
        return decode_result(
            data, req.model, lambda: estimate_completion_input(req), completion=True
        )

    def complete_stream(self, req: CompletionRequest) -> Events:
        body = encode_completion(req, self.flavor, stream=True)
        decoder = ChatStreamDecoder(self.name)
        return self._stream(
            "/completions", body, req.model, decoder, lambda: estimate_completion_input(req)
        )

    def _stream(
        self,
        path: str,
        body: dict[str, Any],
        model: str,
        decoder: ChatStreamDecoder,
        estimate_input: Callable[[], int],
    ) -> Events:
        def ending() -> list[StreamEvent]:
            usage = decoder.close(saw_end_marker=decoder.saw_done, estimate_input=estimate_input)
            return [*decoder.out, Done(usage)]

        return self.http.decoded(
            self.api + path,
            body,
            model,
            lines=False,
            feed=decoder.feed_data,
            out=decoder.out,
            ending=ending,
        )

    async def embed(self, req: EmbeddingRequest) -> EmbeddingResult:
        data = await self.http.post_json(self.api + "/embeddings", encode_embedding(req), req.model)
        return decode_embeddings(data, req.model, lambda: estimate_embedding_input(req))

    async def score(self, req: RelevanceRequest) -> RelevanceResult:
        """Through the Jina-style `/rerank` under the OpenAI routes, one call per distinct query
        (a rerank has one)."""
        extra = req.extra if self.flavor.pass_extra else {}
        scores = [0.0] * len(req.documents)
        tokens: int | None = 0
        for query, indexes in query_groups(req).items():
            body = encode_rerank(req.model, query, [req.documents[i] for i in indexes], extra)
            data = await self.http.post_json(self.api + "/rerank", body, req.model)
            got, used = decode_rerank(data, len(indexes), self.name)
            for i, score in zip(indexes, got, strict=True):
                scores[i] = score
            tokens = None if tokens is None or used is None else tokens + used
        return relevance_result(req, scores, tokens, lambda: estimate_relevance_input(req))

    async def count_chat_tokens(self, req: ChatRequest) -> int | None:
        return None

    async def aclose(self) -> None:
        await self.http.aclose()
