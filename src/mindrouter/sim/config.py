"""What a simulated engine serves and how it behaves: plain data, mutable at run time.

The fault and pacing fields are read again for every request, so a test (or `POST /sim/control`)
can change them on a running server and the next request sees the new values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Engine = Literal["vllm", "ollama", "llamacpp"]
ModelKind = Literal["chat", "vision", "embedding", "rerank"]

ENGINES: tuple[Engine, ...] = ("vllm", "ollama", "llamacpp")
DEFAULT_CONTEXT = 8192


@dataclass
class SimModel:
    name: str
    context_length: int = DEFAULT_CONTEXT
    kind: ModelKind = "chat"

    @property
    def thinks(self) -> bool:
        """Models named like reasoning models think unless the request turns it off."""
        lowered = self.name.lower()
        return "think" in lowered or "reason" in lowered

    @property
    def is_embedding(self) -> bool:
        return self.kind == "embedding"

    @property
    def is_reranker(self) -> bool:
        return self.kind == "rerank"

    @property
    def generates(self) -> bool:
        """Chat and vision models generate text; embedding and rerank models only read it."""
        return self.kind in ("chat", "vision")

    @property
    def sees_images(self) -> bool:
        return self.kind == "vision"


@dataclass
class SimConfig:
    engine: Engine
    models: list[SimModel]
    slots: int = 4
    tokens_per_second: float = 0.0
    ttft_ms: float = 0.0
    default_tokens: int = 24
    embedding_dim: int = 64
    fail_rate: float = 0.0
    fail_status: int = 500
    hang_rate: float = 0.0
    drop_after: int | None = None
    stall_after: int | None = None
    seed: int = 0
    reasoning_field: str = "reasoning"

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; expected one of {ENGINES}")
        if not self.models:
            self.models = [SimModel(default_model_name(self.engine))]
        if self.slots < 1:
            raise ValueError("slots must be at least 1")
        if self.reasoning_field not in ("reasoning", "reasoning_content"):
            raise ValueError("reasoning_field must be 'reasoning' or 'reasoning_content'")
        if self.engine == "ollama" and any(m.is_reranker for m in self.models):
            raise ValueError("Ollama has no rerank API; serve rerank models on vllm or llamacpp")

    def find_model(self, name: str) -> SimModel | None:
        for model in self.models:
            if model.name == name:
                return model
        return None


def default_model_name(engine: Engine) -> str:
    # Ollama model names always carry a tag; the other engines serve bare names.
    return "sim-chat:latest" if engine == "ollama" else "sim-chat"


def parse_model_spec(spec: str, kind: ModelKind = "chat") -> SimModel:
    """Parse `NAME[:CONTEXT]`.

    The part after the last colon is a context length only when it is all digits, so Ollama names
    such as `qwen3:8b` or `llama3:latest` stay whole while `qwen3:8b:32768` sets the context.
    """
    spec = spec.strip()
    name, sep, tail = spec.rpartition(":")
    if sep and name and tail.isdigit():
        context = int(tail)
        if context < 1:
            raise ValueError(f"context length must be positive in {spec!r}")
        return SimModel(name=name, context_length=context, kind=kind)
    if not spec:
        raise ValueError("empty model name")
    return SimModel(name=spec, kind=kind)
