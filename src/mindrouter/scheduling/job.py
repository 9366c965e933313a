"""What the scheduler knows about one request: who, which model, how big, and since when.

A job is created by the schedule stage once the request is decoded and its tokens are estimated.
Its weight is the user's group `scheduler_weight`, copied in so that the queue never has to look
settings up. The job holds no priority field: its rank changes with the clock (the wait bonus) and
with everyone else's usage, so it is computed when a decision is made (`FairQueue.priority`) and
shown in the admin snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Modality = Literal["chat", "multimodal", "embedding", "rerank"]
MODALITIES: frozenset[str] = frozenset({"chat", "multimodal", "embedding", "rerank"})


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    user: str
    model: str
    weight: float
    est_prompt_tokens: int
    est_output_tokens: int
    modality: Modality
    enqueued_at: float
    # Backend features the job cannot be served without (structured output): it waits for a
    # slot on a backend that has them, and others may take a free slot it cannot use.
    requires: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # Checked here, once, so that every division by the weight downstream is safe.
        if not self.weight > 0:
            raise ValueError(f"job {self.id}: weight must be positive, got {self.weight}")
        if self.est_prompt_tokens < 0 or self.est_output_tokens < 0:
            raise ValueError(f"job {self.id}: token estimates must not be negative")
        if self.modality not in MODALITIES:
            raise ValueError(f"job {self.id}: unknown modality {self.modality!r}")


@dataclass(frozen=True, slots=True)
class TokenCosts:
    """How much one token adds to a counter before the weight divides it.

    Output tokens cost twice a prompt token by default, as in the Virtual Token Counter paper:
    decoding is sequential and holds a slot for the whole stream, while a prompt is prefilled in
    one parallel pass. Embeddings and reranking only ever pay the prompt rate.
    """

    prompt: float = 1.0
    output: float = 2.0

    def __post_init__(self) -> None:
        if self.prompt < 0 or self.output < 0:
            raise ValueError("token costs must not be negative")

    def of(self, prompt_tokens: float, output_tokens: float) -> float:
        return self.prompt * prompt_tokens + self.output * output_tokens
