"""Load and unload calls, and the `keep_alive` duration that steers them.

Ollama clients warm a model with a request that asks for nothing: `/api/generate` with an empty
prompt, or `/api/chat` with no messages. The server answers at once with `done_reason:"load"`,
or `"unload"` when `keep_alive` is zero, and generates nothing. The gateway has to recognise
these before scheduling, so they never cost a GPU slot or a token.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from mindrouter.dialects.ollama.fields import JSONObject, as_object, invalid, opt_list, opt_str

LoadAction = Literal["load", "unload"]

# One `<number><unit>` step of a Go duration ("1h30m", "1.5s", "300ms").
_DURATION_STEP = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_keep_alive(value: object, param: str = "keep_alive") -> float | None:
    """`keep_alive` in seconds: None when absent, `math.inf` for "keep loaded forever".

    Numbers are seconds and strings are Go durations (`"5m"`, `"1h30m"`, `"0"`), as Ollama
    reads them; any negative value means forever.
    """
    if value is None:
        return None
    seconds: float | None
    if isinstance(value, bool):
        seconds = None
    elif isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf if value > 0 else -math.inf
    elif isinstance(value, str):
        seconds = _go_duration(value)
    else:
        seconds = None
    if seconds is None or math.isnan(seconds):
        raise invalid(param, 'must be a duration such as "5m" or "1h", or a number of seconds')
    return math.inf if seconds < 0 else seconds


def _go_duration(text: str) -> float | None:
    sign = 1.0
    if text[:1] in ("+", "-"):
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        return None
    total = 0.0
    pos = 0
    while pos < len(text):
        step = _DURATION_STEP.match(text, pos)
        if step is None:
            return None
        total += float(step.group(1)) * _UNIT_SECONDS[step.group(2)]
        pos = step.end()
    return sign * total


def _action(body: JSONObject) -> LoadAction:
    return "unload" if parse_keep_alive(body.get("keep_alive")) == 0 else "load"


def chat_load_action(body: object) -> LoadAction | None:
    """ "load"/"unload" when a /api/chat body has no messages, None when it asks for a reply."""
    obj = as_object(body, "")
    if opt_list(obj, "messages", ""):
        return None
    return _action(obj)


def generate_load_action(body: object) -> LoadAction | None:
    """ "load"/"unload" when a /api/generate body has an empty prompt, None otherwise."""
    obj = as_object(body, "")
    if opt_str(obj, "prompt", ""):
        return None
    return _action(obj)


def encode_chat_load_response(action: LoadAction, *, model: str, created_at: str) -> dict[str, Any]:
    """The single JSON object Ollama answers a chat load call with (never streamed)."""
    return {
        "model": model,
        "created_at": created_at,
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "done_reason": action,
    }


def encode_generate_load_response(
    action: LoadAction, *, model: str, created_at: str
) -> dict[str, Any]:
    """The single JSON object Ollama answers a generate load call with (never streamed)."""
    return {
        "model": model,
        "created_at": created_at,
        "response": "",
        "done": True,
        "done_reason": action,
    }
