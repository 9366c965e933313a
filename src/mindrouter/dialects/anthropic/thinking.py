"""Extended thinking: the request's `thinking` config, and the signatures on thinking blocks.

Anthropic clients expect every thinking block to carry a `signature` and send it back unchanged
on the next turn. The gateway's backends produce no such thing, so the gateway makes its own:
`gw1:` + urlsafe base64 of HMAC-SHA256(key, text). The version prefix leaves room to change the
scheme, and the HMAC lets the gateway tell its own, unaltered thinking from anything else.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from mindrouter.canonical import Effort, Reasoning
from mindrouter.dialects.anthropic.fields import (
    as_choice,
    as_int,
    as_object,
    child,
    invalid,
    required,
    shown,
)

SIGNATURE_PREFIX = "gw1:"
MIN_BUDGET_TOKENS = 1024
THINKING_TYPES = ("enabled", "disabled", "adaptive", "between_tools")
DISPLAY_MODES = ("summarized", "omitted", "updates")
OUTPUT_EFFORTS: tuple[Effort, ...] = ("low", "medium", "high", "xhigh", "max")


def _mac(text: str, key: bytes) -> bytes:
    # surrogatepass: text that came through a lenient JSON parser must still be signable.
    return hmac.new(key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()


def sign_thinking(text: str, key: bytes) -> str:
    """The signature the gateway puts on a thinking block it returns."""
    return SIGNATURE_PREFIX + base64.urlsafe_b64encode(_mac(text, key)).decode("ascii")


def verify_thinking(text: str, signature: str, key: bytes) -> bool:
    """Whether `signature` is this gateway's signature of `text` under `key` (constant time)."""
    expected = sign_thinking(text, key).encode("ascii")
    return hmac.compare_digest(expected, signature.encode("utf-8", "surrogatepass"))


def effort_from_budget(budget_tokens: int) -> Effort:
    """The gateway's policy for backends that take an effort level rather than a token budget."""
    if budget_tokens < 2048:
        return "low"
    if budget_tokens < 8192:
        return "medium"
    return "high"


def decode_effort(output_config: dict[str, Any] | None) -> Effort | None:
    """`output_config.effort`, when given."""
    if output_config is None or output_config.get("effort") is None:
        return None
    path = "output_config.effort"
    chosen = as_choice(output_config["effort"], path, OUTPUT_EFFORTS)
    return next(e for e in OUTPUT_EFFORTS if e == chosen)


def decode_reasoning(value: object, *, effort: Effort | None, max_tokens: int | None) -> Reasoning:
    """The `thinking` field as canonical reasoning.

    `effort` is `output_config.effort`. Without a `thinking` field it still travels (with the
    backend's default mode), since it also governs how much the model does outside thinking.
    `max_tokens` is None on count_tokens, where the budget cannot be checked against it.
    """
    if value is None:
        return Reasoning(mode="default", effort=effort)
    config = as_object(value, "thinking")
    kind = as_choice(required(config, "type", "thinking"), "thinking.type", THINKING_TYPES)
    display = config.get("display")
    if display is not None:
        display = as_choice(display, "thinking.display", DISPLAY_MODES)
    # "omitted" still has the model think; it only keeps the thinking text from the caller.
    return_reasoning = display != "omitted"
    if kind == "disabled":
        return Reasoning(mode="off", return_reasoning=return_reasoning)
    if kind != "enabled":
        # adaptive (and between_tools, which is adaptive thinking limited to tool steps): the
        # model decides whether and how much to think, guided by the effort level when one is
        # given. So the backend's own behaviour stands: a model that cannot think answers
        # without thinking (Ollama refuses an explicit `think` on such a model).
        return Reasoning(mode="default", effort=effort, return_reasoning=return_reasoning)
    budget_path = child("thinking", "budget_tokens")
    budget = as_int(
        required(config, "budget_tokens", "thinking"), budget_path, minimum=MIN_BUDGET_TOKENS
    )
    if max_tokens is not None and budget >= max_tokens:
        raise invalid(
            budget_path, f"must be less than max_tokens ({shown(max_tokens)}), got {shown(budget)}"
        )
    return Reasoning(
        mode="on",
        effort=effort_from_budget(budget),
        budget_tokens=budget,
        return_reasoning=return_reasoning,
    )
