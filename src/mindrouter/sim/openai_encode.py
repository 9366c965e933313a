"""OpenAI wire shapes for vLLM and llama.cpp: chat completions, legacy completions, embeddings.

Streams are shaped as the engines send them: a first delta with the role, one chunk per token, a
chunk with `finish_reason`, then (only with `stream_options.include_usage`) a `choices: []` usage
chunk, then `data: [DONE]`. The two engines differ in small ways that are kept: vLLM adds
`stop_reason` to each choice, `logprobs: null`, and names the reasoning field per
`reasoning_field`; llama.cpp sends `content: null` in the role delta, uses `reasoning_content`,
adds `system_fingerprint` and `timings`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from mindrouter.sim.openai_decode import Dialect
from mindrouter.sim.playback import Encoder, Timing
from mindrouter.sim.text import ChoicePlan, Step

DONE = b"data: [DONE]\n\n"
LLAMACPP_FINGERPRINT = "b6500-sim"


@dataclass(frozen=True)
class Flavour:
    engine: Dialect
    reasoning_field: str

    @property
    def vllm(self) -> bool:
        return self.engine == "vllm"


def sse(payload: Any) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def llamacpp_timings(timing: Timing) -> dict[str, Any]:
    prompt_ms = timing.prefill_s * 1000
    predicted_ms = timing.decode_s * 1000
    prompt_n, predicted_n = timing.prompt_tokens, timing.completion_tokens
    return {
        "cache_n": 0,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / max(1, prompt_n),
        "prompt_per_second": prompt_n / max(prompt_ms / 1000, 1e-6),
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / max(1, predicted_n),
        "predicted_per_second": predicted_n / max(predicted_ms / 1000, 1e-6),
    }


class OpenAIEncoder(Encoder):
    """What chat and text completions share: the envelope, usage and the stream ending."""

    object_name = "chat.completion.chunk"

    def __init__(
        self,
        flavour: Flavour,
        model: str,
        plans: Sequence[ChoicePlan],
        prompt_tokens: int,
        *,
        include_usage: bool = False,
        continuous_usage: bool = False,
    ) -> None:
        self.flavour = flavour
        self.model = model
        self.plans = plans
        self.prompt_tokens = prompt_tokens
        self.include_usage = include_usage
        self.continuous_usage = continuous_usage and flavour.vllm
        self.id = new_id("chatcmpl" if self.object_name.startswith("chat") else "cmpl")
        self.created = int(time.time())

    def usage(self, completion_tokens: int) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
        }
        usage["prompt_tokens_details"] = None if self.flavour.vllm else {"cached_tokens": 0}
        return usage

    def payload(self, choices: list[dict[str, Any]], generated: int) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "id": self.id,
            "object": self.object_name,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if not self.flavour.vllm:
            payload["system_fingerprint"] = LLAMACPP_FINGERPRINT
        if self.continuous_usage:
            payload["usage"] = self.usage(generated)
        elif self.include_usage:
            payload["usage"] = None
        return payload

    def chunk(self, choices: list[dict[str, Any]], generated: int) -> bytes:
        return sse(self.payload(choices, generated))

    def finish_choice(self, plan: ChoicePlan) -> dict[str, Any]:
        raise NotImplementedError

    def end_choice(self, plan: ChoicePlan, generated: int) -> list[bytes]:
        # llama.cpp sends its finish chunk last, carrying `timings`: see `end`.
        if not self.flavour.vllm:
            return []
        return [self.chunk([self.finish_choice(plan)], generated)]

    def finish_fields(self, plan: ChoicePlan) -> dict[str, Any]:
        fields: dict[str, Any] = {"finish_reason": plan.finish}
        if self.flavour.vllm:
            fields["stop_reason"] = plan.stop_word
        return fields

    def end(self, timing: Timing) -> list[bytes]:
        payloads: list[dict[str, Any]] = []
        if not self.flavour.vllm:
            generated = timing.completion_tokens
            payloads.extend(self.payload([self.finish_choice(p)], generated) for p in self.plans)
        if self.include_usage:
            usage_chunk = self.payload([], timing.completion_tokens)
            usage_chunk["usage"] = self.usage(timing.completion_tokens)
            payloads.append(usage_chunk)
        if payloads and not self.flavour.vllm:
            payloads[-1]["timings"] = llamacpp_timings(timing)
        return [*(sse(payload) for payload in payloads), DONE]

    def envelope(self, object_name: str, choices: list[dict[str, Any]], timing: Timing) -> bytes:
        payload: dict[str, Any] = {
            "id": self.id,
            "object": object_name,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": self.usage(timing.completion_tokens),
        }
        if self.flavour.vllm:
            payload["system_fingerprint"] = None
        else:
            payload["system_fingerprint"] = LLAMACPP_FINGERPRINT
            payload["timings"] = llamacpp_timings(timing)
        return orjson.dumps(payload)


class ChatEncoder(OpenAIEncoder):
    def __init__(self, *args: Any, include_reasoning: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.include_reasoning = include_reasoning
        self.reasoning_key = (
            self.flavour.reasoning_field if self.flavour.vllm else "reasoning_content"
        )

    def _choice(self, index: int, delta: dict[str, Any]) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": index, "delta": delta, "finish_reason": None}
        if self.flavour.vllm:
            choice["logprobs"] = None
        return choice

    def begin(self) -> list[bytes]:
        content = "" if self.flavour.vllm else None
        delta = {"role": "assistant", "content": content}
        return [self.chunk([self._choice(plan.index, delta)], 0) for plan in self.plans]

    def step(self, plan: ChoicePlan, step: Step, generated: int) -> list[bytes]:
        delta: dict[str, Any]
        if step.kind == "reasoning":
            if not self.include_reasoning:
                return []
            delta = {self.reasoning_key: step.text}
        elif step.kind == "content":
            if not step.text:
                return []
            delta = {"content": step.text}
        elif step.kind == "tool_call":
            call = plan.tool_call
            header = {
                "index": 0,
                "id": call.id if call else "",
                "type": "function",
                "function": {"name": step.text, "arguments": ""},
            }
            delta = {"tool_calls": [header]}
        else:
            delta = {"tool_calls": [{"index": 0, "function": {"arguments": step.text}}]}
        return [self.chunk([self._choice(plan.index, delta)], generated)]

    def finish_choice(self, plan: ChoicePlan) -> dict[str, Any]:
        choice = self._choice(plan.index, {})
        choice.update(self.finish_fields(plan))
        return choice

    def _message(self, plan: ChoicePlan) -> dict[str, Any]:
        call = plan.tool_call
        calls = []
        if call is not None:
            function = {"name": call.name, "arguments": call.arguments}
            calls.append({"id": call.id, "type": "function", "function": function})
        content: str | None = plan.content if call is None else (plan.content or None)
        reasoning = plan.reasoning if self.include_reasoning and plan.reasoning else None
        if self.flavour.vllm:
            return {
                "role": "assistant",
                "content": content,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": calls,
                self.reasoning_key: reasoning,
            }
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = calls
        return message

    def body(self, timing: Timing) -> bytes:
        choices = []
        for plan in self.plans:
            choice: dict[str, Any] = {"index": plan.index, "message": self._message(plan)}
            choice["logprobs"] = None
            choice.update(self.finish_fields(plan))
            choices.append(choice)
        return self.envelope("chat.completion", choices, timing)


class CompletionEncoder(OpenAIEncoder):
    object_name = "text_completion"

    def _choice(self, index: int, text: str, plan: ChoicePlan | None = None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": index, "text": text, "logprobs": None}
        if plan is None:
            choice["finish_reason"] = None
            if self.flavour.vllm:
                choice["stop_reason"] = None
        else:
            choice.update(self.finish_fields(plan))
        return choice

    def step(self, plan: ChoicePlan, step: Step, generated: int) -> list[bytes]:
        if not step.text:
            return []
        return [self.chunk([self._choice(plan.index, step.text)], generated)]

    def finish_choice(self, plan: ChoicePlan) -> dict[str, Any]:
        return self._choice(plan.index, "", plan)

    def body(self, timing: Timing) -> bytes:
        choices = [self._choice(plan.index, plan.content, plan) for plan in self.plans]
        return self.envelope("text_completion", choices, timing)


class BodyEncoder(Encoder):
    """A response computed whole, e.g. embeddings; the callback may use the timings."""

    def __init__(self, build: Callable[[Timing], Any]) -> None:
        self.build = build

    def body(self, timing: Timing) -> bytes:
        return orjson.dumps(self.build(timing))
