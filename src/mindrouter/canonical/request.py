"""Canonical requests: one shape for every client dialect and every backend engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mindrouter.canonical.content import Message

Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
EFFORTS: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


@dataclass(slots=True)
class Sampling:
    """Output limit and sampling parameters; None means "the backend's default"."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    n: int = 1


@dataclass(slots=True)
class ResponseFormat:
    """`text` (free), `json` (any JSON object) or `json_schema` (constrained by `schema`)."""

    kind: Literal["text", "json", "json_schema"] = "text"
    schema: dict[str, Any] | None = None
    name: str | None = None
    strict: bool | None = None


@dataclass(slots=True)
class Reasoning:
    """Whether and how much the model should think.

    mode `default` leaves the backend's own behaviour alone; `on`/`off` are explicit requests.
    `return_reasoning` False asks that the reasoning text not be returned (it is still generated).
    """

    mode: Literal["default", "off", "on"] = "default"
    effort: Effort | None = None
    budget_tokens: int | None = None
    return_reasoning: bool = True


@dataclass(slots=True)
class Tool:
    name: str
    description: str | None = None
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None


@dataclass(slots=True)
class ToolChoice:
    """`auto`, `none`, `required` (some tool must be called) or `named` (that tool must be)."""

    mode: Literal["auto", "none", "required", "named"] = "auto"
    name: str | None = None
    parallel: bool | None = None


Modality = Literal["chat", "multimodal", "embedding", "completion", "rerank"]


@dataclass(slots=True)
class ChatRequest:
    model: str
    messages: list[Message]
    sampling: Sampling = field(default_factory=Sampling)
    response_format: ResponseFormat | None = None
    reasoning: Reasoning = field(default_factory=Reasoning)
    tools: list[Tool] = field(default_factory=list)
    tool_choice: ToolChoice | None = None
    stream: bool = False
    # Engine-specific fields the client sent that have no canonical meaning (vLLM's min_tokens,
    # llama.cpp's mirostat, ...). Passed only to engines that speak OpenAI's wire format.
    extra: dict[str, Any] = field(default_factory=dict)
    user: str | None = None

    @property
    def modality(self) -> Modality:
        for m in self.messages:
            if m.images():
                return "multimodal"
        return "chat"


@dataclass(slots=True)
class CompletionRequest:
    """A raw text completion (OpenAI legacy /v1/completions, Ollama /api/generate with raw)."""

    model: str
    prompt: list[str]
    sampling: Sampling = field(default_factory=Sampling)
    suffix: str | None = None
    echo: bool = False
    stream: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    user: str | None = None

    @property
    def modality(self) -> Modality:
        return "completion"


@dataclass(slots=True)
class EmbeddingRequest:
    model: str
    inputs: list[str] | list[list[int]]
    dimensions: int | None = None
    truncate: bool = True
    user: str | None = None

    @property
    def modality(self) -> Modality:
        return "embedding"


@dataclass(slots=True)
class RelevanceRequest:
    """How relevant each document is to a query: one number per document, nothing generated.

    Rerank sends one query for all its documents; score may pair each document with a query of
    its own. So `queries` holds either one query, compared with every document, or exactly one
    per document. How the scores are ordered, cut or shown is the client dialect's business.
    """

    model: str
    queries: list[str]
    documents: list[str]
    # Engine-specific fields the client sent (vLLM's truncate_prompt_tokens, ...), passed to
    # engines that speak OpenAI's wire format, as for chat.
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.queries) not in (1, len(self.documents)):
            raise ValueError("queries must hold one query or one per document")

    def query_of(self, index: int) -> str:
        return self.queries[0] if len(self.queries) == 1 else self.queries[index]

    @property
    def modality(self) -> Modality:
        return "rerank"


AnyRequest = ChatRequest | CompletionRequest | EmbeddingRequest | RelevanceRequest
# What an engine answers with generated text (streamed, or collected into one answer).
GenerationRequest = ChatRequest | CompletionRequest
