"""The OpenAI-compatible endpoints that vLLM and llama.cpp share, with per-engine hooks.

Subclasses decide how a model name resolves, how an over-long request is refused (or cut), what
their error bodies look like and which extra routes they serve.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from mindrouter.sim.config import SimModel
from mindrouter.sim.embedding import embedding_vector, to_base64, truncate
from mindrouter.sim.engine import RequestRecord, SimError, SimState, handle_request
from mindrouter.sim.openai_chat import decode_chat
from mindrouter.sim.openai_decode import Dialect, decode_completion, decode_embedding
from mindrouter.sim.openai_encode import (
    BodyEncoder,
    ChatEncoder,
    CompletionEncoder,
    Flavour,
    new_id,
)
from mindrouter.sim.playback import GenerationResponse, HangResponse, Job, Timing
from mindrouter.sim.rerank import decode_rerank, decode_score, relevance_reply
from mindrouter.sim.text import ReplySpec, plan_reply
from mindrouter.sim.tokenizer import count_tokens, render_chat

Want = Literal["chat", "embedding", "rerank"]


def serves(model: SimModel, want: Want) -> bool:
    if want == "embedding":
        return model.is_embedding
    if want == "rerank":
        return model.is_reranker
    return model.generates


class OpenAIServer:
    dialect: Dialect = "vllm"
    # vLLM (FastAPI) sends the stream's headers before generation starts; llama.cpp and Ollama
    # only with the first chunk.
    headers_early = False

    def __init__(self, state: SimState) -> None:
        self.state = state

    # Hooks -------------------------------------------------------------------------------------

    def resolve_model(self, name: str, want: Want) -> SimModel:
        raise NotImplementedError

    def fit(self, model: SimModel, prompt_tokens: int, max_tokens: int | None) -> int:
        """The completion budget, or a `SimError` when the engine refuses the request."""
        raise NotImplementedError

    def render_error(self, error: SimError) -> Response:
        raise NotImplementedError

    def echo_model(self, requested: str, model: SimModel) -> str:
        return model.name

    # Shared machinery --------------------------------------------------------------------------

    @property
    def flavour(self) -> Flavour:
        return Flavour(self.dialect, self.state.config.reasoning_field)

    def first_model(self, want: Want) -> SimModel:
        models = self.state.config.models
        for model in models:
            if serves(model, want):
                return model
        return models[0]

    def fault(self, record: RequestRecord) -> ASGIApp | None:
        fault = self.state.roll_fault()
        if fault == "fail":
            record.fault = "fail"
            raise SimError(self.state.config.fail_status, "simulated engine failure", "server")
        if fault == "hang":
            return HangResponse(self.state, record)
        return None

    def openai_routes(self, prefixes: tuple[str, ...] = ("/v1",)) -> list[Route]:
        routes: list[Route] = []
        for prefix in prefixes:
            routes += [
                Route(f"{prefix}/chat/completions", self.chat, methods=["POST"]),
                Route(f"{prefix}/completions", self.completions, methods=["POST"]),
                Route(f"{prefix}/embeddings", self.embeddings, methods=["POST"]),
            ]
        return routes

    async def _handle(self, request: Request, handler: Any) -> ASGIApp:
        path = request.scope["path"]
        return await handle_request(self.state, request, path, handler, self.render_error)

    async def chat(self, request: Request) -> ASGIApp:
        return await self._handle(request, self._chat)

    async def completions(self, request: Request) -> ASGIApp:
        return await self._handle(request, self._completions)

    async def embeddings(self, request: Request) -> ASGIApp:
        return await self._handle(request, self._embeddings)

    async def rerank(self, request: Request) -> ASGIApp:
        return await self._handle(
            request, lambda body, record: relevance_reply(self, decode_rerank(body), record, True)
        )

    async def score(self, request: Request) -> ASGIApp:
        return await self._handle(
            request, lambda body, record: relevance_reply(self, decode_score(body), record, False)
        )

    # Handlers ----------------------------------------------------------------------------------

    def _chat(self, body: Any, record: RequestRecord) -> ASGIApp:
        config = self.state.config
        chat = decode_chat(body, self.dialect)
        model = self.resolve_model(chat.model, "chat")
        record.model = model.name
        if chat.images and not model.sees_images:
            raise SimError(400, self.no_images_message(model), param="messages")
        prompt = render_chat(chat.messages, chat.tools)
        record.prompt_tokens = tokens = count_tokens(prompt)
        budget = self.fit(model, tokens, chat.max_tokens)
        if (hang := self.fault(record)) is not None:
            return hang
        spec = ReplySpec(
            seed_text=f"{model.name}\0{prompt}",
            budget=budget,
            default_tokens=config.default_tokens,
            stop=chat.stop,
            thinking=model.thinks if chat.thinking is None else chat.thinking,
            stop_test=chat.stop_test,
            images=chat.images,
            tool=chat.tool,
            json_mode=chat.json_mode,
            json_schema=chat.json_schema,
            choice=chat.choice,
            ignore_eos=chat.ignore_eos,
        )
        plans = [plan_reply(spec, index) for index in range(chat.n)]
        encoder = ChatEncoder(
            self.flavour,
            self.echo_model(chat.model, model),
            plans,
            tokens,
            include_usage=chat.include_usage,
            continuous_usage=chat.continuous_usage,
            include_reasoning=chat.include_reasoning,
        )
        job = Job(record, plans, encoder, chat.stream, headers_early=self.headers_early)
        return GenerationResponse(self.state, job)

    def no_images_message(self, model: SimModel) -> str:
        return f"model {model.name} does not support image input"

    def _completions(self, body: Any, record: RequestRecord) -> ASGIApp:
        config = self.state.config
        request = decode_completion(body, self.dialect)
        model = self.resolve_model(request.model, "chat")
        record.model = model.name
        record.prompt_tokens = sum(prompt.tokens for prompt in request.prompts)
        budgets = [self.fit(model, prompt.tokens, request.max_tokens) for prompt in request.prompts]
        if (hang := self.fault(record)) is not None:
            return hang
        plans = []
        for number, (prompt, budget) in enumerate(zip(request.prompts, budgets, strict=True)):
            spec = ReplySpec(
                seed_text=f"{model.name}\0{prompt.seed_text}",
                budget=budget,
                default_tokens=config.default_tokens,
                stop=request.stop,
                ignore_eos=request.ignore_eos,
            )
            plans += [plan_reply(spec, number * request.n + j) for j in range(request.n)]
        encoder = CompletionEncoder(
            self.flavour,
            self.echo_model(request.model, model),
            plans,
            record.prompt_tokens,
            include_usage=request.include_usage,
            continuous_usage=request.continuous_usage,
        )
        job = Job(record, plans, encoder, request.stream, headers_early=self.headers_early)
        return GenerationResponse(self.state, job)

    def _embeddings(self, body: Any, record: RequestRecord) -> ASGIApp:
        config = self.state.config
        request = decode_embedding(body)
        model = self.resolve_model(request.model, "embedding")
        record.model = model.name
        for item in request.inputs:
            self.fit(model, item.tokens, 0)
        dim = config.embedding_dim
        if request.dimensions is not None and request.dimensions > dim:
            raise SimError(400, f"dimensions must be at most {dim}", param="dimensions")
        record.prompt_tokens = tokens = sum(item.tokens for item in request.inputs)
        if (hang := self.fault(record)) is not None:
            return hang
        vectors = [
            truncate(embedding_vector(item.seed_text, dim), request.dimensions, normalise=True)
            for item in request.inputs
        ]
        name = self.echo_model(request.model, model)
        vllm = self.dialect == "vllm"

        def build(timing: Timing) -> dict[str, Any]:
            data = [
                {
                    "index": index,
                    "object": "embedding",
                    "embedding": to_base64(vector) if request.base64 else vector,
                }
                for index, vector in enumerate(vectors)
            ]
            usage: dict[str, Any] = {"prompt_tokens": tokens, "total_tokens": tokens}
            response: dict[str, Any] = {"model": name, "object": "list", "data": data}
            response["usage"] = usage
            if vllm:
                usage.update(completion_tokens=0, prompt_tokens_details=None)
                response.update(id=new_id("embd"), created=int(time.time()))
            return response

        return GenerationResponse(self.state, Job(record, [], BodyEncoder(build), stream=False))
