"""llama.cpp's native `POST /completion` endpoint (not OpenAI-shaped).

Request: `prompt` (a string or token ids), `n_predict` (-1 = unlimited), `stop`, `stream`,
`json_schema`. The answer carries `content`, `stop`, `stop_type` ("eos", "limit" or "word"),
`stopping_word`, `tokens_predicted`, `tokens_evaluated` and `timings`. Streams are SSE `data:`
lines, one per token, the last one with `stop: true`, and no `[DONE]`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from starlette.types import ASGIApp

from mindrouter.sim.engine import RequestRecord, SimError
from mindrouter.sim.openai_decode import decode_inputs, decode_stop, int_field, json_object
from mindrouter.sim.openai_encode import llamacpp_timings, sse
from mindrouter.sim.playback import Encoder, GenerationResponse, Job, Timing
from mindrouter.sim.text import ChoicePlan, ReplySpec, Step, plan_reply

if TYPE_CHECKING:
    from mindrouter.sim.llamacpp import LlamaCppServer


def stop_type(plan: ChoicePlan) -> str:
    if plan.stop_word is not None:
        return "word"
    return "limit" if plan.finish == "length" else "eos"


class NativeEncoder(Encoder):
    def __init__(self, model: str, plan: ChoicePlan, prompt: str, prompt_tokens: int) -> None:
        self.model = model
        self.plan = plan
        self.prompt = prompt
        self.prompt_tokens = prompt_tokens

    def step(self, plan: ChoicePlan, step: Step, generated: int) -> list[bytes]:
        if step.kind != "content" or not step.text:
            return []
        return [
            sse(
                {
                    "index": 0,
                    "content": step.text,
                    "tokens": [],
                    "stop": False,
                    "id_slot": -1,
                    "tokens_predicted": generated,
                    "tokens_evaluated": self.prompt_tokens,
                }
            )
        ]

    def final(self, content: str, timing: Timing) -> dict[str, Any]:
        plan = self.plan
        return {
            "index": 0,
            "content": content,
            "tokens": [],
            "id_slot": 0,
            "stop": True,
            "model": self.model,
            "tokens_predicted": timing.completion_tokens,
            "tokens_evaluated": self.prompt_tokens,
            "generation_settings": {"n_predict": -1, "temperature": 0.8},
            "prompt": self.prompt,
            "has_new_line": False,
            "truncated": False,
            "stop_type": stop_type(plan),
            "stopping_word": plan.stop_word or "",
            "tokens_cached": self.prompt_tokens + timing.completion_tokens,
            "timings": llamacpp_timings(timing),
        }

    def end(self, timing: Timing) -> list[bytes]:
        return [sse(self.final("", timing))]

    def body(self, timing: Timing) -> bytes:
        return orjson.dumps(self.final(self.plan.content, timing))


def native_completion(server: LlamaCppServer, body: Any, record: RequestRecord) -> ASGIApp:
    body = json_object(body)
    if "prompt" not in body:
        raise SimError(400, '"prompt" must be provided')
    prompts = decode_inputs(body["prompt"], "prompt")
    if len(prompts) != 1:
        raise SimError(400, "only a single prompt is supported by this simulator")
    prompt = prompts[0]
    model = server.resolve_model(str(body.get("model") or ""), "chat")
    record.model = model.name
    record.prompt_tokens = prompt.tokens
    n_predict = int_field(body, "n_predict", -1)
    limit = None if n_predict is None or n_predict < 0 else n_predict
    budget = server.fit(model, prompt.tokens, limit)
    schema = body.get("json_schema")
    if (hang := server.fault(record)) is not None:
        return hang
    spec = ReplySpec(
        seed_text=f"{model.name}\0{prompt.seed_text}",
        budget=budget,
        default_tokens=server.state.config.default_tokens,
        stop=decode_stop(body.get("stop")),
        json_schema=schema if isinstance(schema, dict) else None,
    )
    plan = plan_reply(spec)
    prompt_text = body["prompt"] if isinstance(body["prompt"], str) else ""
    encoder = NativeEncoder(model.name, plan, prompt_text, prompt.tokens)
    job = Job(record, [plan], encoder, body.get("stream") is True)
    return GenerationResponse(server.state, job)
