"""Ollama's native API (/api/chat, /api/generate, /api/embed) with NDJSON streaming.

Configured URL: the server root (`http://host:11434`), with or without a trailing `/api`.

Context length: Ollama loads a model with `options.num_ctx`, and a different value reloads it.
So the size is a per-model setting, not a per-request one: the adapter keeps `context_lengths`
(model name as sent to Ollama → tokens, from the gateway's model configuration; the composition
root may update it as models are discovered) and sends `num_ctx` for the models listed there.
Models not listed run with the server's default.

A model without the thinking capability answers 400 "does not support thinking" when `think` is
sent; that is surfaced as `UpstreamRejected` rather than retried without `think`, because
silently dropping an explicit reasoning request would change what the client asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import aclosing

from mindrouter.backends.base import Timeouts
from mindrouter.backends.failures import load_stream_json
from mindrouter.backends.http import DEFAULT_TIMEOUTS, Upstream
from mindrouter.backends.ollama_results import OllamaDecoder, add_usage, decode_embed
from mindrouter.backends.ollama_wire import Json, encode_chat, encode_embed, encode_generate
from mindrouter.canonical import (
    ChatRequest,
    ChatResult,
    CompletionRequest,
    Done,
    EmbeddingRequest,
    EmbeddingResult,
    Events,
    EventSink,
    RelevanceRequest,
    RelevanceResult,
    StreamEvent,
    TextDelta,
    Usage,
    assemble,
)
from mindrouter.errors import UpstreamRejected, UpstreamUnavailable
from mindrouter.routing.backend_config import Engine
from mindrouter.tokens import count_text, estimate_chat_input, estimate_embedding_input


def ollama_root(url: str) -> str:
    root = url.rstrip("/")
    return root[:-4] if root.endswith("/api") else root


class OllamaAdapter:
    engine: Engine = "ollama"

    def __init__(
        self,
        url: str,
        *,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        api_key: str | None = None,
        name: str | None = None,
        context_lengths: Mapping[str, int] | None = None,
    ) -> None:
        self.url = url
        self.name = name or url
        self.context_lengths: dict[str, int] = dict(context_lengths or {})
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self.http = Upstream(
            ollama_root(url), timeouts=timeouts, backend=self.name, headers=headers
        )

    def _chat_decoder(self, req: ChatRequest) -> OllamaDecoder:
        return OllamaDecoder(self.name, keep_reasoning=req.reasoning.return_reasoning)

    async def chat(self, req: ChatRequest) -> ChatResult:
        body = encode_chat(req, stream=False, num_ctx=self.context_lengths.get(req.model))
        data = await self.http.post_json("/api/chat", body, req.model)
        decoder = self._chat_decoder(req)
        if not decoder.feed(data):
            decoder.feed({"done": True})
        usage = decoder.usage(lambda: estimate_chat_input(req))
        return assemble(req.model, [*decoder.out, Done(usage)])

    def chat_stream(self, req: ChatRequest) -> Events:
        body = encode_chat(req, stream=True, num_ctx=self.context_lengths.get(req.model))
        decoder = self._chat_decoder(req)

        def ending() -> list[StreamEvent]:
            return [Done(decoder.usage(lambda: estimate_chat_input(req)))]

        return self._read("/api/chat", body, req.model, decoder, ending)

    async def complete(self, req: CompletionRequest) -> ChatResult:
        events: list[StreamEvent] = []
        usage = Usage()
        num_ctx = self.context_lengths.get(req.model)
        # /api/generate takes one prompt; several prompts run one after another, one choice each.
        for i, prompt in enumerate(req.prompt):
            body = encode_generate(req, prompt, stream=False, num_ctx=num_ctx)
            data = await self.http.post_json("/api/generate", body, req.model)
            decoder = OllamaDecoder(self.name, choice=i, generate=True)
            if req.echo:
                events.append(TextDelta(prompt, i))
            if not decoder.feed(data):
                decoder.feed({"done": True})
            events.extend(decoder.out)
            usage = add_usage(usage, decoder.usage(_counter(prompt)))
        events.append(Done(usage))
        return assemble(req.model, events)

    async def complete_stream(self, req: CompletionRequest) -> Events:
        usage = Usage()
        num_ctx = self.context_lengths.get(req.model)
        for i, prompt in enumerate(req.prompt):
            body = encode_generate(req, prompt, stream=True, num_ctx=num_ctx)
            decoder = OllamaDecoder(self.name, choice=i, generate=True)
            if req.echo:
                yield TextDelta(prompt, i)
            read = self._read("/api/generate", body, req.model, decoder, list)
            async with aclosing(read) as events:
                sink: EventSink | None = None  # a generator just started takes only None
                while True:
                    try:
                        event = await events.asend(sink)
                    except StopAsyncIteration:
                        break
                    sink = yield event
            usage = add_usage(usage, decoder.usage(_counter(prompt)))
        yield Done(usage)

    def _read(
        self,
        path: str,
        body: Json,
        model: str,
        decoder: OllamaDecoder,
        ending: Callable[[], list[StreamEvent]],
    ) -> Events:
        """The events of one NDJSON stream, up to the decoder's last line, then `ending`'s; an
        error when the last line never came. Closing the generator (the callers close it with
        theirs) closes the upstream connection at once, so the engine stops generating."""
        name = self.name

        def feed(line: bytes) -> bool:
            return not decoder.feed(load_stream_json(line, name))

        def checked() -> list[StreamEvent]:
            if not decoder.done:
                raise UpstreamUnavailable(
                    f"{name}: the stream ended before the answer was finished", name
                )
            return ending()

        return self.http.decoded(
            path, body, model, lines=True, feed=feed, out=decoder.out, ending=checked
        )

    async def embed(self, req: EmbeddingRequest) -> EmbeddingResult:
        data = await self.http.post_json("/api/embed", encode_embed(req), req.model)
        return decode_embed(data, req.model, lambda: estimate_embedding_input(req))

    async def score(self, req: RelevanceRequest) -> RelevanceResult:
        # Never routed here (Ollama backends lack the rerank feature); refused, not attempted.
        raise UpstreamRejected(f"{self.name}: Ollama has no rerank API", 400, self.name)

    async def count_chat_tokens(self, req: ChatRequest) -> int | None:
        # Ollama has no tokenizer endpoint; the pipeline falls back to its estimate.
        return None

    async def aclose(self) -> None:
        await self.http.aclose()


def _counter(prompt: str) -> Callable[[], int]:
    return lambda: count_text(prompt)
