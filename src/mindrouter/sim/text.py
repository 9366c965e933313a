"""Deterministic replies: what a simulated model "generates" for a request.

A reply is planned in full before anything is sent, then played back token by token (see
`engine.py`). The plan depends only on the rendered prompt (and the choice index), so the same
request always gets the same reply.

Tokens. Every reply is a list of steps and every step is exactly one completion token:
- text: one word from `VOCABULARY` per token (the first word bare, later ones with a leading space);
- reasoning: the same, in the engine's reasoning field, before the answer;
- tool call: one token for the call header (id and name), then one per argument fragment;
- JSON / structured output: one token per fragment of the JSON text.

Length. A text reply has `default_tokens` tokens in total, reasoning included (reasoning takes
a third, at most 8). Tool calls and JSON have as many tokens as they have fragments. The reply is
cut to the budget (max_tokens and the room left in the context), and a cut reply finishes with
"length". `ignore_eos` (vLLM) makes a text reply run to the budget.

Triggering behaviours from a test:
- Stop sequence: when the last user message contains `STOPTEST`, the answer starts with the
  words `alpha beta END gamma`. Send `stop=["END"]` and the answer is cut to `"alpha beta "`
  with finish "stop" (vLLM `stop_reason="END"`, llama.cpp `stop_type="word"`, Ollama "stop").
  Any other stop string is honoured the same way wherever it occurs in the answer text.
  (Needs `default_tokens` ≥ 3. Stop strings apply to the answer, not to the reasoning.)
- Tool call: send tools, leave tool_choice unset/"auto"/"required" or name a tool, and make the
  last message that is not a system (or developer) message a user message, with no tool result
  since the last assistant turn (`calls_tool`). The named tool, else the first one, is called with
  arguments built from its schema (`schema.py`). Otherwise the reply is text, so an agent loop
  ends: after a tool result, a user message that only comments on it gets an answer.
- Reasoning: a model whose name contains "think" or "reason", or a request that turns thinking on.
- Images: the answer of a vision model starts with the token `(images:N)`.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from mindrouter.sim.schema import instance_for_schema

VOCABULARY: tuple[str, ...] = (
    "the", "quick", "model", "answers", "with", "simulated", "words", "from", "a", "small",
    "fixed", "list", "so", "that", "every", "reply", "is", "easy", "to", "count", "and",
    "repeat", "river", "stone", "cloud", "light", "paper", "green", "orange", "silver",
    "window", "garden", "number", "signal", "engine", "token", "stream", "gateway", "kernel",
    "vector", "matrix", "cluster", "shared", "queue", "fair", "budget", "slot", "route",
    "cache", "batch", "prompt", "context", "output", "input", "layer", "weight", "north",
    "south", "east", "west", "bright", "quiet", "rapid", "steady",
)  # fmt: skip

STOP_TEST_MARKER = "STOPTEST"
STOP_TEST_WORDS: tuple[str, ...] = ("alpha", "beta", "END", "gamma")
_FRAGMENT_CHARS = 5

FinishReason = Literal["stop", "length", "tool_calls"]
StepKind = Literal["reasoning", "content", "tool_call", "tool_args"]


@dataclass(frozen=True)
class Step:
    kind: StepKind
    text: str


@dataclass(frozen=True)
class ToolSpec:
    name: str
    parameters: Mapping[str, Any]


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass
class ReplySpec:
    """Everything about a request that shapes the reply, in engine-neutral terms."""

    seed_text: str
    budget: int | None
    default_tokens: int
    stop: Sequence[str] = ()
    thinking: bool = False
    stop_test: bool = False
    images: int = 0
    tool: ToolSpec | None = None
    json_mode: bool = False
    json_schema: Mapping[str, Any] | None = None
    choice: str | None = None
    ignore_eos: bool = False


@dataclass
class ChoicePlan:
    index: int
    steps: list[Step] = field(default_factory=list)
    finish: FinishReason = "stop"
    stop_word: str | None = None
    reasoning: str = ""
    content: str = ""
    tool_call: ToolCall | None = None

    @property
    def completion_tokens(self) -> int:
        return len(self.steps)

    @property
    def reasoning_tokens(self) -> int:
        return sum(1 for step in self.steps if step.kind == "reasoning")

    @property
    def eos(self) -> bool:
        """Finished on its own: neither a length cut nor a stop string."""
        return self.finish != "length" and self.stop_word is None


SYSTEM_ROLES = frozenset({"system", "developer"})
TOOL_RESULT_ROLES = frozenset({"tool", "function"})


def calls_tool(roles: Sequence[str]) -> bool:
    """Whether a conversation with tools gets a tool call: its last non-system message is the
    user's, and no tool result came after the last assistant turn.

    Agent clients put system turns after the user's message and follow a tool result with a
    user message of their own; neither may start another round of tool calls.
    """
    since_assistant: list[str] = []
    for role in reversed(roles):
        if role == "assistant":
            break
        since_assistant.append(role)
    spoken = [r for r in since_assistant if r not in SYSTEM_ROLES]
    return bool(spoken) and spoken[0] == "user" and not TOOL_RESULT_ROLES & set(spoken)


def _rng(seed_text: str, index: int) -> random.Random:
    digest = hashlib.blake2b(f"{index}\0{seed_text}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "little"))


def fragments(text: str) -> list[str]:
    """Split JSON text into token-sized pieces: at least three whenever it has three characters."""
    if not text:
        return []
    size = max(1, min(_FRAGMENT_CHARS, len(text) // 3))
    return [text[i : i + size] for i in range(0, len(text), size)]


def new_tool_call_id() -> str:
    return "chatcmpl-tool-" + uuid.uuid4().hex


def _natural_steps(spec: ReplySpec, rng: random.Random) -> list[Step]:
    def word() -> str:
        return rng.choice(VOCABULARY)

    steps: list[Step] = []
    total = max(0, spec.default_tokens)
    if spec.thinking:
        n_reasoning = min(8, max(1, total // 3)) if total else 0
        steps.extend(
            Step("reasoning", word() if i == 0 else " " + word()) for i in range(n_reasoning)
        )
        total -= n_reasoning
    if spec.tool is not None:
        arguments = orjson.dumps(instance_for_schema(spec.tool.parameters, word)).decode()
        steps.append(Step("tool_call", spec.tool.name))
        steps.extend(Step("tool_args", piece) for piece in fragments(arguments))
        return steps
    if spec.choice is not None:
        steps.append(Step("content", spec.choice))
        return steps
    if spec.json_mode or spec.json_schema is not None:
        if spec.json_schema is not None:
            value: Any = instance_for_schema(spec.json_schema, word)
        else:
            value = {"response": " ".join(word() for _ in range(max(1, min(total, 5))))}
        text = orjson.dumps(value).decode()
        steps.extend(Step("content", piece) for piece in fragments(text))
        return steps
    words: list[str] = []
    if spec.images:
        words.append(f"(images:{spec.images})")
    if spec.stop_test:
        words.extend(STOP_TEST_WORDS)
    if spec.ignore_eos and spec.budget is not None:
        total = max(total, spec.budget - len(steps))
    while len(words) < total:
        words.append(word())
    del words[total:]
    steps.extend(Step("content", w if i == 0 else " " + w) for i, w in enumerate(words))
    return steps


def _trim_content(steps: list[Step], keep: int) -> list[Step]:
    """Cut the answer text to `keep` characters across the content steps already planned.

    A stop string may span several tokens; trimming the planned (not yet sent) steps gives the
    same effect as an engine holding back text that could be the start of a stop string.
    """
    trimmed: list[Step] = []
    for step in steps:
        if step.kind == "content":
            trimmed.append(Step("content", step.text[: max(0, keep)]))
            keep -= len(step.text)
        else:
            trimmed.append(step)
    return trimmed


def plan_reply(spec: ReplySpec, index: int = 0) -> ChoicePlan:
    plan = ChoicePlan(index=index)
    natural = _natural_steps(spec, _rng(spec.seed_text, index))
    stops = [s for s in spec.stop if s]
    longest_stop = max((len(s) for s in stops), default=0)
    reasoning: list[str] = []
    content = ""
    arguments: list[str] = []
    finish: FinishReason = "tool_calls" if spec.tool is not None else "stop"
    for step in natural:
        if spec.budget is not None and len(plan.steps) >= spec.budget:
            finish = "length"
            break
        if step.kind == "content" and stops:
            before = len(content)
            content += step.text
            window_start = max(0, before - longest_stop + 1)
            hits = [(content.find(s, window_start), s) for s in stops]
            found = [(pos, s) for pos, s in hits if pos >= 0]
            if found:
                pos, word = min(found)
                plan.steps.append(step)
                plan.steps = _trim_content(plan.steps, pos)
                content = content[:pos]
                plan.stop_word = word
                finish = "stop"
                break
        elif step.kind == "content":
            content += step.text
        elif step.kind == "reasoning":
            reasoning.append(step.text)
        elif step.kind == "tool_args":
            arguments.append(step.text)
        plan.steps.append(step)
    if spec.tool is not None and any(s.kind == "tool_call" for s in plan.steps):
        plan.tool_call = ToolCall(new_tool_call_id(), spec.tool.name, "".join(arguments))
    elif finish == "tool_calls":
        finish = "stop"
    plan.finish = finish
    plan.reasoning = "".join(reasoning)
    plan.content = content
    return plan
