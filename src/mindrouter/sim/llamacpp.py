"""A simulated llama.cpp `llama-server`.

One model per server, as `llama-server -m` runs: the `model` field of a request is ignored and
the first configured model answers. When several models are configured the server behaves like
router mode instead: a request naming one of them is served by it, any other name by the first.
GET routes (`/props`, `/slots`) take `?model=` the same way.

A prompt that does not fit gets `exceed_context_size_error` (with `n_prompt_tokens`, `n_ctx`);
`max_tokens` beyond the room left simply stops at the context (finish "length"). An embedding
request to a chat model (or the reverse) gets 501 `not_supported_error`, as a server started
without (with) `--embeddings` answers; a rerank request to a model that is not a reranker gets
the 501 of a server started without `--reranking`. Reasoning goes to `reasoning_content`.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from mindrouter.sim.config import SimModel
from mindrouter.sim.engine import SimError, json_response, read_json_object
from mindrouter.sim.llamacpp_native import native_completion
from mindrouter.sim.metrics import Exposition, add_sim_families
from mindrouter.sim.openai_chat import decode_messages
from mindrouter.sim.openai_encode import LLAMACPP_FINGERPRINT
from mindrouter.sim.openai_server import OpenAIServer, Want
from mindrouter.sim.tokenizer import decode, encode, render_chat, token_piece, vocabulary_size

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    501: "not_supported_error",
    503: "unavailable_error",
}
_KIND_TYPES = {
    "context": "exceed_context_size_error",
    "unsupported": "not_supported_error",
    "not_found": "not_found_error",
}


def llamacpp_error_body(status: int, message: str, error_type: str | None = None) -> Any:
    kind = error_type or _ERROR_TYPES.get(status, "server_error")
    return {"error": {"code": status, "message": message, "type": kind}}


class LlamaCppServer(OpenAIServer):
    dialect = "llamacpp"

    def render_error(self, error: SimError) -> Response:
        body = llamacpp_error_body(error.status, error.message, _KIND_TYPES.get(error.kind))
        body["error"].update(error.extra)
        return json_response(body, error.status)

    def pick(self, name: str | None) -> SimModel:
        models = self.state.config.models
        return (self.state.config.find_model(name) if name else None) or models[0]

    def resolve_model(self, name: str, want: Want) -> SimModel:
        model = self.pick(name)
        if want == "embedding" and not model.is_embedding:
            raise SimError(
                501,
                "This server does not support embeddings. Start it with `--embeddings`",
                "unsupported",
            )
        if want == "rerank" and not model.is_reranker:
            raise SimError(
                501,
                "This server does not support reranking. Start it with `--reranking`",
                "unsupported",
            )
        if want == "chat" and not model.generates:
            raise SimError(
                501,
                "This server does not support completions. Start it without `--embeddings`",
                "unsupported",
            )
        return model

    def echo_model(self, requested: str, model: SimModel) -> str:
        return requested or model.name

    def fit(self, model: SimModel, prompt_tokens: int, max_tokens: int | None) -> int:
        n_ctx = model.context_length
        if prompt_tokens >= n_ctx:
            raise SimError(
                400,
                f"request ({prompt_tokens} tokens) exceeds the available context size "
                f"({n_ctx} tokens), try increasing it",
                "context",
                extra={"n_prompt_tokens": prompt_tokens, "n_ctx": n_ctx},
            )
        room = n_ctx - prompt_tokens
        return room if max_tokens is None else min(max_tokens, room)

    def no_images_message(self, model: SimModel) -> str:
        return (
            "image input is not supported - hint: if this is unexpected, "
            "you may need to provide the mmproj"
        )

    async def unknown_route(self, request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        return json_response(
            llamacpp_error_body(404, "File Not Found"), 404 if status == 405 else status
        )

    def routes(self) -> list[Route]:
        return [
            *self.openai_routes(),
            *[
                Route(p, self.rerank, methods=["POST"])
                for p in ("/rerank", "/reranking", "/v1/rerank", "/v1/reranking")
            ],
            Route("/chat/completions", self.chat, methods=["POST"]),
            Route("/completion", self.native, methods=["POST"]),
            Route("/completions", self.native, methods=["POST"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/health", self.health, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/models", self.models, methods=["GET"]),
            Route("/props", self.props, methods=["GET"]),
            Route("/slots", self.slots, methods=["GET"]),
            Route("/tokenize", self.tokenize, methods=["POST"]),
            Route("/detokenize", self.detokenize, methods=["POST"]),
            Route("/apply-template", self.apply_template, methods=["POST"]),
            Route("/metrics", self.metrics, methods=["GET"]),
        ]

    async def native(self, request: Request) -> ASGIApp:
        return await self._handle(
            request, lambda body, record: native_completion(self, body, record)
        )

    async def health(self, request: Request) -> Response:
        if not self.state.healthy:
            return json_response(llamacpp_error_body(503, "Loading model"), 503)
        return json_response({"status": "ok"})

    async def models(self, request: Request) -> Response:
        created = int(self.state.started_wall)
        data = [
            {
                "id": model.name,
                "object": "model",
                "created": created,
                "owned_by": "llamacpp",
                "meta": {
                    "vocab_type": 2,
                    "n_vocab": vocabulary_size(),
                    "n_ctx_train": model.context_length,
                    "n_embd": self.state.config.embedding_dim if model.is_embedding else 4096,
                    "n_params": 8_030_261_248,
                    "size": 4_920_734_272,
                },
            }
            for model in self.state.config.models
        ]
        return json_response({"object": "list", "data": data})

    async def props(self, request: Request) -> Response:
        model = self.pick(request.query_params.get("model"))
        settings = {
            "id": 0,
            "id_task": -1,
            "n_ctx": model.context_length,
            "is_processing": False,
            "params": {"n_predict": -1, "temperature": 0.8, "top_k": 40, "top_p": 0.95},
        }
        return json_response(
            {
                "default_generation_settings": settings,
                "total_slots": self.state.config.slots,
                "model_alias": model.name,
                "model_path": f"/models/{model.name}.gguf",
                "modalities": {"vision": model.sees_images, "audio": False},
                "chat_template": "{{ sim chat template: see mindrouter.sim.tokenizer }}",
                "bos_token": "",
                "eos_token": "",
                "build_info": LLAMACPP_FINGERPRINT,
                "is_sleeping": False,
            }
        )

    async def slots(self, request: Request) -> Response:
        model = self.pick(request.query_params.get("model"))
        busy = self.state.slots.running
        total = self.state.config.slots
        if request.query_params.get("fail_on_no_slot") in ("1", "true") and busy >= total:
            return json_response(llamacpp_error_body(503, "no slot available"), 503)
        entries = [
            {
                "id": index,
                "id_task": -1,
                "n_ctx": model.context_length,
                "speculative": False,
                "is_processing": index < busy,
                "params": {"n_predict": -1},
                "next_token": [
                    {
                        "has_next_token": index < busy,
                        "n_remain": -1,
                        "n_decoded": 0,
                        "stopping_word": "",
                    }
                ],
            }
            for index in range(total)
        ]
        return json_response(entries)

    async def tokenize(self, request: Request) -> Response:
        try:
            body = await read_json_object(request)
            content = body.get("content")
            if not isinstance(content, str):
                raise SimError(400, "content must be a string")
        except SimError as error:
            return self.render_error(error)
        ids = encode(content)
        if body.get("with_pieces") is True:
            return json_response({"tokens": [{"id": i, "piece": token_piece(i)} for i in ids]})
        return json_response({"tokens": ids})

    async def detokenize(self, request: Request) -> Response:
        try:
            body = await read_json_object(request)
            tokens = body.get("tokens", [])
            if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
                raise SimError(400, "tokens must be a list of integers")
        except SimError as error:
            return self.render_error(error)
        return json_response({"content": decode(tokens)})

    async def apply_template(self, request: Request) -> Response:
        try:
            body = await read_json_object(request)
            messages = decode_messages(body.get("messages"))
        except SimError as error:
            return self.render_error(error)
        tools = body.get("tools") if isinstance(body.get("tools"), list) else None
        return json_response({"prompt": render_chat(messages, tools)})

    async def metrics(self, request: Request) -> Response:
        state = self.state
        out = Exposition()
        rate = float(state.config.tokens_per_second)
        for name, kind, text, value in (
            (
                "llamacpp:prompt_tokens_total",
                "counter",
                "Number of prompt tokens processed.",
                state.prompt_tokens_total,
            ),
            (
                "llamacpp:tokens_predicted_total",
                "counter",
                "Number of generation tokens processed.",
                state.generation_tokens_total,
            ),
            (
                "llamacpp:prompt_tokens_seconds",
                "gauge",
                "Average prompt throughput in tokens/s.",
                0.0,
            ),
            (
                "llamacpp:predicted_tokens_seconds",
                "gauge",
                "Average generation throughput in tokens/s.",
                rate,
            ),
            (
                "llamacpp:requests_processing",
                "gauge",
                "Number of requests processing.",
                state.slots.running,
            ),
            (
                "llamacpp:requests_deferred",
                "gauge",
                "Number of requests deferred.",
                state.slots.waiting,
            ),
            (
                "llamacpp:n_busy_slots_per_decode",
                "gauge",
                "Average number of busy slots per decode.",
                state.slots.running,
            ),
        ):
            out.family(name, kind, text, [({}, float(value))])
        add_sim_families(out, state)
        return PlainTextResponse(out.text(), media_type="text/plain; version=0.0.4")
