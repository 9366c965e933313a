"""Turn what goes wrong upstream into the gateway's error tree, once, at the edge.

Three sources: an HTTP status with an error body, an error payload inside a stream that already
started, and an exception from the HTTP client. Engines disagree on the body shape:

- OpenAI / vLLM / llama.cpp: `{"error": {"message", "type", "code", ...}}`
- older vLLM:               `{"object": "error", "message", "type", "code"}`
- Ollama:                   `{"error": "text"}`
- FastAPI-based servers:    `{"detail": ...}`

so one tolerant reader handles all of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from mindrouter.backends.fields import token_count
from mindrouter.backends.http_client import CannotConnect, ConnectTimeout
from mindrouter.errors import (
    ContextLengthExceeded,
    MindRouterError,
    ModelNotFound,
    UpstreamError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)

# Engines word "the prompt does not fit" differently; this runs only on the error path.
_CONTEXT_WORDING = re.compile(
    r"context length|context window|maximum context|context size|too long|too many tokens", re.I
)
_CONTEXT_TYPES = frozenset({"exceed_context_size_error", "context_length_exceeded"})


# What the HTTP client (`http_client`) and the socket layer may raise; everything else is a
# bug, not a failure.
CLIENT_FAILURES: tuple[type[BaseException], ...] = (OSError, TimeoutError, ValueError)


@dataclass(slots=True)
class ErrorBody:
    message: str
    type: str | None = None
    input_tokens: int | None = None
    context_length: int | None = None


def read_error_body(raw: bytes) -> ErrorBody:
    """The message (and what else is known) from any engine's error body; raw text otherwise."""
    try:
        data = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        text = raw.decode("utf-8", "replace").strip()
        return ErrorBody(text[:2000] or "no error message")
    return read_error_object(data.get("error", data))


def read_error_object(err: Any) -> ErrorBody:
    if isinstance(err, str):
        return ErrorBody(err)
    if not isinstance(err, dict):
        return ErrorBody(str(err))
    message = err.get("message", err.get("detail"))
    if not isinstance(message, str):
        message = orjson.dumps(message).decode() if message is not None else "no error message"
    kind = err.get("type")
    code = err.get("code")
    return ErrorBody(
        message,
        type=kind if isinstance(kind, str) else (code if isinstance(code, str) else None),
        input_tokens=token_count(err.get("n_prompt_tokens")),
        context_length=token_count(err.get("n_ctx")),
    )


def error_from_status(status: int, raw: bytes, model: str, backend: str) -> MindRouterError:
    """The error for a non-2xx answer.

    401/403 mean the gateway's own credentials for the backend are wrong, which the client can
    neither see nor fix, so they count as an unavailable backend (another one may work).
    A 404 is a missing model only when the message says so; a missing route is a plain rejection.
    """
    body = read_error_body(raw)
    where = f"{backend}: {body.message}"
    if body.type in _CONTEXT_TYPES or (status in (400, 413, 422) and _mentions_context(body)):
        return ContextLengthExceeded(
            body.message, input_tokens=body.input_tokens, context_length=body.context_length
        )
    if status == 404 and "model" in body.message.lower():
        return ModelNotFound(model, body.message)
    if status == 408:
        return UpstreamTimeout(f"{backend} timed out the request: {body.message}", backend)
    if status in (401, 403, 429) or status >= 500:
        return UpstreamUnavailable(where, backend, status=status)
    if 400 <= status < 500:
        return UpstreamRejected(body.message, status, backend)
    return UpstreamUnavailable(f"{backend} answered with status {status}", backend, status=status)


def _mentions_context(body: ErrorBody) -> bool:
    return _CONTEXT_WORDING.search(body.message) is not None


def error_from_stream_payload(err: Any, backend: str) -> UpstreamUnavailable:
    """An error the engine reported in-band after the stream had started."""
    body = read_error_object(err)
    return UpstreamUnavailable(f"{backend} failed mid-stream: {body.message}", backend)


def error_from_exception(exc: BaseException, backend: str, stage: str) -> UpstreamError:
    """Translate an HTTP-client or socket exception; `stage` says what we were doing."""
    if isinstance(exc, ConnectTimeout):
        return UpstreamTimeout(f"{backend}: connect timeout while {stage}", backend)
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout(f"{backend}: total time limit exceeded while {stage}", backend)
    if isinstance(exc, CannotConnect):
        return UpstreamUnavailable(f"{backend}: cannot connect ({exc})", backend)
    if isinstance(exc, ConnectionError):
        return UpstreamUnavailable(f"{backend}: connection dropped while {stage}", backend)
    if isinstance(exc, ValueError):
        return UpstreamUnavailable(f"{backend}: malformed response while {stage}: {exc}", backend)
    return UpstreamUnavailable(f"{backend}: {type(exc).__name__} while {stage}: {exc}", backend)


def invalid_json(backend: str, stage: str) -> UpstreamUnavailable:
    return UpstreamUnavailable(
        f"{backend}: sent a body that is not a JSON object while {stage}", backend
    )


def malformed_piece(backend: str) -> UpstreamUnavailable:
    return UpstreamUnavailable(
        f"{backend}: sent a stream piece of an unexpected shape (a field of the wrong type)",
        backend,
    )


def load_stream_json(payload: bytes, backend: str) -> Any:
    """One piece of an engine's stream (an event's data, an NDJSON line), parsed."""
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise invalid_json(backend, "reading the stream") from exc


def no_choices(backend: str) -> UpstreamUnavailable:
    return UpstreamUnavailable(f"{backend}: the answer has no choices", backend)
