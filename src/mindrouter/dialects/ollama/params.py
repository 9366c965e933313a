"""Decode the generation controls shared by /api/chat and /api/generate.

`options` carries the sampling settings under Ollama's own names; the ones with a canonical
meaning are mapped, `num_ctx` is kept in `extra["num_ctx"]` (it sizes the context the model is
loaded with, which only an Ollama backend can honour), and every other option is passed on
untouched in `extra["options"]` for the same reason. `think` maps onto canonical reasoning
(§6.2) and `format` onto a response format.
"""

from __future__ import annotations

from mindrouter.canonical import Effort, Reasoning, ResponseFormat, Sampling
from mindrouter.dialects.ollama.fields import (
    JSONObject,
    as_object,
    as_str,
    field,
    invalid,
    kind_of,
    opt_bool,
    opt_float,
    opt_int,
)

# Options with a canonical home; anything else is engine-specific.
_MAPPED_OPTIONS = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "num_predict",
        "stop",
        "seed",
        "repeat_penalty",
        "presence_penalty",
        "frequency_penalty",
        "num_ctx",
    }
)

_THINK_LEVELS: dict[str, Effort] = {"low": "low", "medium": "medium", "high": "high", "max": "max"}

# Ollama refuses larger values with a 400 (§3.1).
MAX_TOP_LOGPROBS = 20


def decode_options(body: JSONObject) -> tuple[Sampling, JSONObject]:
    """The sampling settings in `body["options"]`, and the entries they add to `extra`."""
    options = body.get("options")
    sampling = Sampling()
    extra: JSONObject = {}
    if options is None:
        return sampling, extra
    opts = as_object(options, "options")
    where = "options"
    sampling.temperature = opt_float(opts, "temperature", where, lo=0.0)
    sampling.top_p = opt_float(opts, "top_p", where, lo=0.0, hi=1.0)
    sampling.top_k = opt_int(opts, "top_k", where, lo=0)
    sampling.min_p = opt_float(opts, "min_p", where, lo=0.0, hi=1.0)
    sampling.seed = opt_int(opts, "seed", where)
    sampling.repetition_penalty = opt_float(opts, "repeat_penalty", where, lo=0.0)
    sampling.presence_penalty = opt_float(opts, "presence_penalty", where)
    sampling.frequency_penalty = opt_float(opts, "frequency_penalty", where)
    # Ollama's runner only enforces a positive limit: -1 (unlimited), -2 (fill the context) and 0
    # all let the model run until it stops or the context is full, which is "no limit" here.
    num_predict = opt_int(opts, "num_predict", where)
    sampling.max_tokens = num_predict if num_predict is not None and num_predict > 0 else None
    sampling.stop = _stop_list(opts.get("stop"), field(where, "stop"))
    num_ctx = opt_int(opts, "num_ctx", where, lo=1)
    if num_ctx is not None:
        extra["num_ctx"] = num_ctx
    rest = {k: v for k, v in opts.items() if k not in _MAPPED_OPTIONS}
    if rest:
        extra["options"] = rest
    return sampling, extra


def _stop_list(value: object, param: str) -> list[str]:
    if value is None:
        return []
    # A lone string is a common slip for a one-element list; its meaning is unambiguous.
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise invalid(param, f"must be an array of strings, got {kind_of(value)}")
    stops: list[str] = []
    for i, item in enumerate(items):
        where = field(param, i) if isinstance(value, list) else param
        text = as_str(item, where)
        if not text:
            raise invalid(where, "must not be empty")
        stops.append(text)
    return stops


def decode_think(body: JSONObject) -> Reasoning:
    """`think`: true/false switch thinking on/off; a level switches it on with that effort."""
    value = body.get("think")
    if value is None:
        return Reasoning()
    if isinstance(value, bool):
        return Reasoning(mode="on" if value else "off")
    if isinstance(value, str) and value in _THINK_LEVELS:
        return Reasoning(mode="on", effort=_THINK_LEVELS[value])
    shown = repr(value) if isinstance(value, str) else kind_of(value)
    raise invalid("think", f'must be true, false, "low", "medium", "high" or "max", got {shown}')


def decode_format(body: JSONObject) -> ResponseFormat | None:
    """`format`: "" (free text), "json" (any JSON) or a JSON Schema object."""
    value = body.get("format")
    if value is None or value == "":
        return None
    if value == "json":
        return ResponseFormat(kind="json")
    if isinstance(value, dict):
        # An empty schema constrains nothing beyond "valid JSON".
        if not value:
            return ResponseFormat(kind="json")
        return ResponseFormat(kind="json_schema", schema=value)
    shown = repr(value) if isinstance(value, str) else kind_of(value)
    raise invalid("format", f'must be "", "json" or a JSON Schema object, got {shown}')


def check_logprobs(body: JSONObject) -> None:
    """Validate `logprobs`/`top_logprobs` as Ollama does.

    They are not forwarded: the canonical result has no place for log probabilities, so asking
    a backend for them would only cost time.
    """
    opt_bool(body, "logprobs", "")
    opt_int(body, "top_logprobs", "", lo=0, hi=MAX_TOP_LOGPROBS)


def check_flags(body: JSONObject, *names: str) -> None:
    """Validate boolean fields that are accepted but have no canonical effect."""
    for name in names:
        opt_bool(body, name, "")
