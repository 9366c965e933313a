"""Ollama wire details: timestamps, keep_alive durations and the NDJSON chat/generate encoder.

Streams are `application/x-ndjson`, one JSON object per line: `done: false` pieces (thinking
before content, a tool call whole in one piece), then one `done: true` object with `done_reason`
and the metrics in nanoseconds.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import orjson

from mindrouter.sim.engine import SimError
from mindrouter.sim.playback import Encoder, Timing
from mindrouter.sim.text import ChoicePlan, Step

DEFAULT_KEEP_ALIVE_S = 300.0
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def rfc3339(seconds: float | None = None) -> str:
    """RFC 3339 in UTC with nanoseconds, as Go prints `time.Time`."""
    ns = time.time_ns() if seconds is None else int(seconds * 1_000_000_000)
    whole, fraction = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{fraction:09d}Z"


def keep_alive_seconds(value: Any) -> float | None:
    """Seconds to keep a model loaded after a request; None means forever (negative values)."""
    if value is None:
        return DEFAULT_KEEP_ALIVE_S
    if isinstance(value, bool):
        raise SimError(400, "keep_alive must be a duration or a number of seconds")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        try:
            seconds = float(value)
        except ValueError:
            text = value.strip()
            sign = -1.0 if text.startswith("-") else 1.0
            text = text.lstrip("+-")
            parts = _DURATION_PART.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise SimError(400, f'time: invalid duration "{value}"') from None
            seconds = sign * sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    else:
        raise SimError(400, "keep_alive must be a duration or a number of seconds")
    return None if seconds < 0 else seconds


def _ns(seconds: float) -> int:
    return max(1, int(seconds * 1_000_000_000))


def metrics_fields(timing: Timing) -> dict[str, int]:
    return {
        "total_duration": _ns(timing.total_s),
        "load_duration": _ns(timing.queue_s),
        "prompt_eval_count": timing.prompt_tokens,
        "prompt_eval_duration": _ns(timing.prefill_s),
        "eval_count": timing.completion_tokens,
        "eval_duration": _ns(timing.decode_s),
    }


class OllamaEncoder(Encoder):
    """`/api/chat` pieces carry `message`; `/api/generate` pieces carry `response`/`thinking`."""

    stream_media_type = "application/x-ndjson"
    body_media_type = "application/json; charset=utf-8"

    def __init__(
        self, model: str, plan: ChoicePlan, generate: bool = False, context: list[int] | None = None
    ) -> None:
        self.model = model
        self.plan = plan
        self.generate = generate
        self.context = context
        # A tool call cut short by the budget never parses as a call: its text is plain content.
        self.call_complete = plan.tool_call is not None and plan.finish != "length"
        self.args_left = sum(1 for step in plan.steps if step.kind == "tool_args")
        self.call_id = "call_" + uuid.uuid4().hex[:8]

    def tool_calls(self) -> list[dict[str, Any]] | None:
        call = self.plan.tool_call
        if call is None or not self.call_complete:
            return None
        function = {"index": 0, "name": call.name, "arguments": orjson.loads(call.arguments)}
        return [{"id": self.call_id, "function": function}]

    def piece(
        self, content: str, thinking: str | None = None, calls: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model, "created_at": rfc3339()}
        if self.generate:
            out["response"] = content
            if thinking:
                out["thinking"] = thinking
        else:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = calls
            out["message"] = message
        out["done"] = False
        return out

    @staticmethod
    def line(payload: dict[str, Any]) -> bytes:
        return orjson.dumps(payload) + b"\n"

    def step(self, plan: ChoicePlan, step: Step, generated: int) -> list[bytes]:
        if step.kind == "reasoning":
            return [self.line(self.piece("", thinking=step.text))]
        if step.kind == "content" or (step.kind == "tool_args" and not self.call_complete):
            return [self.line(self.piece(step.text))] if step.text else []
        if step.kind == "tool_args":
            self.args_left -= 1
            if self.args_left == 0:
                return [self.line(self.piece("", calls=self.tool_calls()))]
        return []

    def _finish(self, out: dict[str, Any], timing: Timing) -> bytes:
        out["done"] = True
        out["done_reason"] = "length" if self.plan.finish == "length" else "stop"
        if self.generate and self.context is not None:
            out["context"] = self.context
        out.update(metrics_fields(timing))
        return orjson.dumps(out)

    def end(self, timing: Timing) -> list[bytes]:
        return [self._finish(self.piece(""), timing) + b"\n"]

    def body(self, timing: Timing) -> bytes:
        plan = self.plan
        content = plan.content
        if plan.tool_call is not None and not self.call_complete:
            content = plan.tool_call.arguments
        return self._finish(self.piece(content, plan.reasoning or None, self.tool_calls()), timing)
