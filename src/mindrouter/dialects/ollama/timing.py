"""Ollama's timestamps and performance metrics.

Ollama reports durations in integer nanoseconds, and clients compute speed from them
(`eval_count / eval_duration * 1e9` tokens per second). Backends other than Ollama report no such
figures, so the gateway synthesises them from its own clock readings: the time to the first token
stands in for prompt evaluation and the rest of the stream for generation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from mindrouter.canonical import Usage

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Timings:
    """Durations in nanoseconds, as Ollama reports them."""

    total_ns: int = 0
    load_ns: int = 0
    prompt_eval_ns: int = 0
    eval_ns: int = 0

    @classmethod
    def from_marks(
        cls, *, start: float, first_token: float | None, end: float, load: float = 0.0
    ) -> Timings:
        """Timings from monotonic clock readings in seconds.

        `first_token` is when the first output arrived (None when none did: then all the time
        counts as prompt evaluation); `load` is a model load time in seconds, when known. Readings
        out of order are clamped so no duration is ever negative.
        """
        end = max(end, start)
        first = end if first_token is None else min(max(first_token, start), end)
        return cls(
            total_ns=_ns(end - start),
            load_ns=_ns(load),
            prompt_eval_ns=_ns(first - start),
            eval_ns=_ns(end - first),
        )


def _ns(seconds: float) -> int:
    return max(0, round(seconds * _NS))


def metrics(timings: Timings, usage: Usage) -> dict[str, Any]:
    """The metric fields of a final Ollama object, in Ollama's order."""
    return {
        "total_duration": timings.total_ns,
        "load_duration": timings.load_ns,
        "prompt_eval_count": usage.input_tokens,
        "prompt_eval_duration": timings.prompt_eval_ns,
        "eval_count": usage.output_tokens,
        "eval_duration": timings.eval_ns,
    }


def format_rfc3339(epoch_seconds: float) -> str:
    """A Unix time as RFC 3339 in UTC with nanoseconds: `2026-01-01T10:00:00.123456789Z`.

    Always nine fractional digits, so timestamps sort as text; any RFC 3339 reader (Go's
    time.Time, pydantic, `datetime.fromisoformat`) accepts the form.
    """
    # Split before scaling: the fraction of a float is exact, its product with 1e9 is not.
    whole = math.floor(epoch_seconds)
    seconds, nanos = divmod(whole * _NS + round((epoch_seconds - whole) * _NS), _NS)
    moment = _EPOCH + timedelta(seconds=seconds)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{nanos:09d}Z"
