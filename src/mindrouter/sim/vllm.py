"""A simulated vLLM OpenAI server.

Serves every configured model under its name, as `--served-model-name` would; rerank models
answer `/rerank` and `/score` (see `rerank.py`). Requests with an
unknown model get vLLM's 404; a prompt that does not fit, or `max_tokens` beyond the room left,
gets vLLM's 400. Reasoning goes to `reasoning` or `reasoning_content` per `reasoning_field`.
Error bodies are `{"error": {"message", "type", "param", "code": <int status>}}`.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from mindrouter.sim.config import SimModel
from mindrouter.sim.engine import SimError, json_response, read_json_object
from mindrouter.sim.metrics import Exposition, add_sim_families
from mindrouter.sim.openai_chat import decode_messages
from mindrouter.sim.openai_server import OpenAIServer, Want, serves
from mindrouter.sim.tokenizer import decode, encode, render_chat, token_text

VLLM_VERSION = "0.11.0"
_APIS = {"chat": "Chat Completions", "embedding": "Embeddings", "rerank": "Rerank (Score)"}


def vllm_error_type(status: int) -> str:
    named = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}
    if status in named:
        return named[status]
    try:
        return HTTPStatus(status).phrase.replace(" ", "").replace("-", "") + "Error"
    except ValueError:
        return "InternalServerError"


class VllmServer(OpenAIServer):
    dialect = "vllm"
    headers_early = True

    def render_error(self, error: SimError) -> Response:
        body = {
            "error": {
                "message": error.message,
                "type": vllm_error_type(error.status),
                "param": error.param,
                "code": error.status,
            }
        }
        return json_response(body, error.status)

    def resolve_model(self, name: str, want: Want) -> SimModel:
        model = self.state.config.find_model(name) if name else self.first_model(want)
        if model is None:
            raise SimError(404, f"The model `{name}` does not exist.", "not_found", param="model")
        if not serves(model, want):
            api = _APIS[want]
            raise SimError(400, f"The model `{model.name}` does not support {api} API")
        return model

    def fit(self, model: SimModel, prompt_tokens: int, max_tokens: int | None) -> int:
        limit = model.context_length
        if prompt_tokens >= limit:
            raise SimError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your "
                f"request has {prompt_tokens} input tokens. Please reduce the length of the "
                "input messages.",
                "context",
                param="messages",
            )
        room = limit - prompt_tokens
        if max_tokens is not None and max_tokens > room:
            raise SimError(
                400,
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
                f"model's maximum context length is {limit} tokens and your request has "
                f"{prompt_tokens} input tokens ({max_tokens} > {limit} - {prompt_tokens}).",
                "context",
                param="max_tokens",
            )
        return room if max_tokens is None else max_tokens

    def no_images_message(self, model: SimModel) -> str:
        return f"{model.name} is not a multimodal model"

    async def unknown_route(self, request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        detail = "Method Not Allowed" if status == 405 else "Not Found"
        return json_response({"detail": detail}, status)

    def routes(self) -> list[Route]:
        return [
            *self.openai_routes(),
            *[
                Route(p, self.rerank, methods=["POST"])
                for p in ("/rerank", "/v1/rerank", "/v2/rerank")
            ],
            *[Route(p, self.score, methods=["POST"]) for p in ("/score", "/v1/score")],
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/ping", self.health, methods=["GET", "POST"]),
            Route("/version", self.version, methods=["GET"]),
            Route("/tokenize", self.tokenize, methods=["POST"]),
            Route("/detokenize", self.detokenize, methods=["POST"]),
            Route("/metrics", self.metrics, methods=["GET"]),
        ]

    async def models(self, request: Request) -> Response:
        created = int(self.state.started_wall)
        cards = [
            {
                "id": model.name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": f"/models/{model.name}",
                "parent": None,
                "max_model_len": model.context_length,
                "permission": [
                    {
                        "id": f"modelperm-{index:032x}",
                        "object": "model_permission",
                        "created": created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
            for index, model in enumerate(self.state.config.models)
        ]
        return json_response({"object": "list", "data": cards})

    async def health(self, request: Request) -> Response:
        return Response(status_code=200 if self.state.healthy else 503)

    async def version(self, request: Request) -> Response:
        return json_response({"version": VLLM_VERSION})

    async def _body(self, request: Request) -> tuple[dict[str, Any], SimModel]:
        body = await read_json_object(request)
        name = body.get("model")
        model = self.resolve_model(name, "chat") if isinstance(name, str) and name else None
        return body, model or self.state.config.models[0]

    async def tokenize(self, request: Request) -> Response:
        try:
            body, model = await self._body(request)
            if "messages" in body:
                add_prompt = body.get("add_generation_prompt", True) is not False
                if add_prompt and body.get("continue_final_message") is True:
                    raise SimError(
                        400,
                        "Cannot set both `continue_final_message` and `add_generation_prompt` "
                        "to True.",
                    )
                messages = decode_messages(body["messages"])
                tools = body.get("tools") if isinstance(body.get("tools"), list) else None
                ids = encode(render_chat(messages, tools, add_generation_prompt=add_prompt))
            elif isinstance(body.get("prompt"), str):
                ids = encode(body["prompt"])
            else:
                raise SimError(400, "either prompt or messages is required")
        except SimError as error:
            return self.render_error(error)
        strings = [token_text(i) for i in ids] if body.get("return_token_strs") else None
        return json_response(
            {
                "count": len(ids),
                "max_model_len": model.context_length,
                "tokens": ids,
                "token_strs": strings,
            }
        )

    async def detokenize(self, request: Request) -> Response:
        try:
            body, _ = await self._body(request)
            tokens = body.get("tokens")
            if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
                raise SimError(400, "tokens must be a list of integers", param="tokens")
        except SimError as error:
            return self.render_error(error)
        return json_response({"prompt": decode(tokens)})

    async def metrics(self, request: Request) -> Response:
        state = self.state
        out = Exposition()
        running = state.running_by_model()
        names = [model.name for model in state.config.models]

        def per_model(values: dict[str, float]) -> list[tuple[dict[str, str], float]]:
            return [({"engine": "0", "model_name": n}, float(values.get(n, 0))) for n in names]

        usage: dict[str, float] = {}
        for model in state.config.models:
            used = sum(
                r.prompt_tokens + r.completion_tokens
                for r in state.active.values()
                if r.model == model.name
            )
            usage[model.name] = min(1.0, used / (model.context_length * state.config.slots))
        out.family(
            "vllm:num_requests_running",
            "gauge",
            "Requests in model execution batches.",
            per_model(dict(running)),
        )
        out.family(
            "vllm:num_requests_waiting",
            "gauge",
            "Requests waiting to be processed.",
            per_model(dict(state.waiting_by_model)),
        )
        out.family(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent.",
            per_model(usage),
        )
        out.family(
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            per_model(dict(state.prompt_tokens_by_model)),
        )
        out.family(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens.",
            per_model(dict(state.generation_tokens_by_model)),
        )
        out.family(
            "vllm:num_preemptions_total", "counter", "Cumulative preemptions.", per_model({})
        )
        first = names[0]
        out.family(
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            [
                ({"engine": "0", "finished_reason": reason, "model_name": first}, float(count))
                for reason, count in sorted(state.finished_by_reason.items())
            ],
        )
        add_sim_families(out, state)
        return PlainTextResponse(out.text(), media_type="text/plain; version=0.0.4")
