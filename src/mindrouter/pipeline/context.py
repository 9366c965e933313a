"""Per-request facts every stage may need, created at the entry point."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Literal

from mindrouter.identity.principal import Principal

Dialect = Literal["openai", "anthropic", "ollama"]


def new_request_id() -> str:
    return "chatcmpl-" + os.urandom(12).hex()


@dataclass(slots=True)
class RequestContext:
    dialect: Dialect
    endpoint: str
    request_id: str = field(default_factory=new_request_id)
    client_ip: str | None = None
    user_agent: str | None = None
    received_at: float = field(default_factory=time.monotonic)
    created: int = field(default_factory=lambda: int(time.time()))
    # Filled in as the request moves through the pipeline.
    principal: Principal | None = None
    backend: str | None = None
    attempts: int = 0
    attempt_started_at: float = 0.0
    queued_s: float = 0.0
    input_estimate: int = 0  # the gateway's count of the input tokens, once stage 4 made it
    outcome: str | None = None  # how it ended, once its metrics and final log line are written
    first_token_at: float | None = None
