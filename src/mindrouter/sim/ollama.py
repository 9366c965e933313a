"""A simulated Ollama server: `/api/chat`, `/api/generate` and the catalogue.

Behaviours worth knowing:
- `stream` defaults to true when absent (the SDK always sends it explicitly).
- `think`: models whose name contains "think"/"reason" think unless `think: false`; `think: true`
  or a level on any other model is a 400 `"<model>" does not support thinking`.
- Tools: the first tool is called when the conversation asks for one (`text.calls_tool`: the
  last non-system message is the user's, no tool result since the last assistant turn); the call
  arrives whole in one chunk with `arguments` as an object, and `done_reason` is "stop".
- Context: a prompt that does not fit is truncated, as Ollama does by default: the prompt is
  counted as half the context and the answer stops at the context. With `truncate: false` the
  request is refused with a 400 instead.
- Empty `messages` (chat) or `prompt` (generate) only loads the model: `done_reason: "load"`, or
  "unload" with `keep_alive: 0`.
- The OpenAI-compatible routes of Ollama (`/v1/...`) are not simulated.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from mindrouter.sim.config import SimModel
from mindrouter.sim.engine import RequestRecord, SimError, handle_request, json_response
from mindrouter.sim.ollama_models import OllamaBase
from mindrouter.sim.ollama_wire import OllamaEncoder, keep_alive_seconds, rfc3339
from mindrouter.sim.playback import GenerationResponse, Job
from mindrouter.sim.text import STOP_TEST_MARKER, ReplySpec, ToolSpec, calls_tool, plan_reply
from mindrouter.sim.tokenizer import ChatMessage, count_tokens, encode, render_chat, tool_calls_text

THINK_LEVELS = frozenset({"low", "medium", "high", "max"})


def decode_messages(raw: Any) -> list[ChatMessage]:
    if not isinstance(raw, list):
        raise SimError(400, "messages must be a list")
    messages: list[ChatMessage] = []
    for message in raw:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise SimError(400, "each message needs a role")
        content = message.get("content") or ""
        images = message.get("images") or []
        if not isinstance(content, str):
            raise SimError(400, "json: cannot unmarshal array into Go struct field .content")
        if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
            raise SimError(400, "images must be a list of base64 strings")
        calls = tool_calls_text(message.get("tool_calls"))
        messages.append(ChatMessage(message["role"], content, len(images), calls))
    return messages


class OllamaServer(OllamaBase):
    def routes(self) -> list[Route]:
        return [
            Route("/", self.root, methods=["GET"]),
            Route("/api/chat", self.chat, methods=["POST"]),
            Route("/api/generate", self.generate, methods=["POST"]),
            Route("/api/embed", self.embed, methods=["POST"]),
            Route("/api/embeddings", self.embeddings, methods=["POST"]),
            Route("/api/tags", self.tags, methods=["GET"]),
            Route("/api/ps", self.ps, methods=["GET"]),
            Route("/api/show", self.show, methods=["POST"]),
            Route("/api/version", self.version, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
        ]

    async def chat(self, request: Request) -> ASGIApp:
        return await handle_request(self.state, request, "/api/chat", self._chat, self.render_error)

    async def generate(self, request: Request) -> ASGIApp:
        return await handle_request(
            self.state, request, "/api/generate", self._generate, self.render_error
        )

    def _thinking(self, model: SimModel, think: Any) -> bool:
        if think is None:
            return model.thinks
        if think is False:
            return False
        if think is True or think in THINK_LEVELS:
            if not model.thinks:
                raise SimError(400, f'"{model.name}" does not support thinking')
            return True
        raise SimError(400, f"invalid think value: {think!r}")

    @staticmethod
    def _format(value: Any) -> tuple[bool, dict[str, Any] | None]:
        if value in (None, ""):
            return False, None
        if value == "json":
            return True, None
        if isinstance(value, dict):
            return True, value
        raise SimError(400, f"invalid format: {value!r}")

    def _loaded_only(
        self, model: SimModel, body: dict[str, Any], record: RequestRecord, generate: bool
    ) -> Response:
        keep = keep_alive_seconds(body.get("keep_alive"))
        if keep == 0:
            self.state.loaded.pop(model.name, None)
        else:
            self.state.mark_loaded(model, keep)
        out: dict[str, Any] = {"model": model.name, "created_at": rfc3339()}
        if generate:
            out["response"] = ""
        else:
            out["message"] = {"role": "assistant", "content": ""}
        out.update(done=True, done_reason="unload" if keep == 0 else "load")
        record.status = 200
        record.finished_at = time.monotonic()
        if body.get("stream", True) is not False:
            return Response(orjson.dumps(out) + b"\n", media_type="application/x-ndjson")
        return json_response(out)

    def _run(
        self,
        body: dict[str, Any],
        record: RequestRecord,
        model: SimModel,
        messages: list[ChatMessage],
        prompt: str,
        *,
        generate: bool,
    ) -> ASGIApp:
        """Shared tail of chat and generate: context, options, faults, plan, playback."""
        keep = keep_alive_seconds(body.get("keep_alive"))
        think = self._thinking(model, body.get("think"))
        if any(m.images for m in messages) and not model.sees_images:
            raise SimError(400, f'"{model.name}" does not support images')
        json_mode, schema = self._format(body.get("format"))
        options = body.get("options") or {}
        if not isinstance(options, dict):
            raise SimError(400, "options must be an object")
        num_ctx = options.get("num_ctx")
        context = num_ctx if isinstance(num_ctx, int) and num_ctx > 0 else model.context_length
        prior: list[int] = []
        if generate and isinstance(body.get("context"), list):
            prior = [i for i in body["context"] if isinstance(i, int)]
        tokens = count_tokens(prompt) + len(prior)
        if tokens >= context:
            if body.get("truncate") is False:
                raise SimError(400, "the input length exceeds the context length")
            tokens = context // 2
        record.prompt_tokens = tokens
        num_predict = options.get("num_predict")
        room = context - tokens
        budget = room
        if isinstance(num_predict, int) and num_predict >= 0:
            budget = min(num_predict, room)
        stop = options.get("stop") or []
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise SimError(400, "options.stop must be a list of strings")
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            raise SimError(400, "tools must be a list")
        tool = None
        if tools and calls_tool([m.role for m in messages]):
            function = tools[0].get("function") if isinstance(tools[0], dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise SimError(400, "each tool needs function.name")
            parameters = function.get("parameters")
            tool = ToolSpec(function["name"], parameters if isinstance(parameters, dict) else {})
        self.state.mark_loaded(model, keep)
        if (hang := self.fault(record)) is not None:
            return hang
        users = [m for m in messages if m.role == "user"]
        spec = ReplySpec(
            seed_text=f"{model.name}\0{prompt}",
            budget=budget,
            default_tokens=self.state.config.default_tokens,
            stop=stop,
            thinking=think,
            stop_test=bool(users) and STOP_TEST_MARKER in users[-1].text,
            images=sum(m.images for m in messages),
            tool=tool,
            json_mode=json_mode,
            json_schema=schema,
        )
        plan = plan_reply(spec)
        ids = [*prior, *encode(prompt), *encode(plan.content)] if generate else None
        encoder = OllamaEncoder(model.name, plan, generate=generate, context=ids)
        stream = body.get("stream", True) is not False
        job = Job(record, [plan], encoder, stream)
        job.on_finish = lambda: self.state.mark_loaded(model, keep)
        return GenerationResponse(self.state, job)

    def _chat(self, body: Any, record: RequestRecord) -> ASGIApp:
        model = self.lookup(body)
        record.model = model.name
        if not body.get("messages"):
            return self._loaded_only(model, body, record, generate=False)
        if model.is_embedding:
            raise SimError(400, f'"{model.name}" does not support chat')
        messages = decode_messages(body["messages"])
        tools = body.get("tools") if isinstance(body.get("tools"), list) else None
        return self._run(
            body, record, model, messages, render_chat(messages, tools), generate=False
        )

    def _generate(self, body: Any, record: RequestRecord) -> ASGIApp:
        model = self.lookup(body)
        record.model = model.name
        prompt = body.get("prompt") or ""
        images = body.get("images") or []
        if not isinstance(prompt, str) or not isinstance(images, list):
            raise SimError(400, "prompt must be a string and images a list")
        if not prompt and not images:
            return self._loaded_only(model, body, record, generate=True)
        if model.is_embedding:
            raise SimError(400, f'"{model.name}" does not support generate')
        system = body.get("system")
        messages = [ChatMessage("user", prompt, len(images))]
        if isinstance(system, str) and system:
            messages.insert(0, ChatMessage("system", system))
        text = prompt if body.get("raw") is True else render_chat(messages)
        return self._run(body, record, model, messages, text, generate=True)
