"""OpenAI error bodies for gateway errors.

The openai SDK picks its exception class from the HTTP status alone (chosen in `http/`), and
copies `type`, `code` and `param` from this body onto the exception, so they are what client code
can branch on. The same body, framed as an SSE data line, reports a failure mid-stream.
"""

from __future__ import annotations

from typing import Any

import orjson

from mindrouter.errors import InvalidRequest, MindRouterError, ModelNotFound

# kind -> (type, code)
_SHAPES: dict[str, tuple[str, str | None]] = {
    "invalid_request": ("invalid_request_error", None),
    "context_length_exceeded": ("invalid_request_error", "context_length_exceeded"),
    "unauthenticated": ("authentication_error", "invalid_api_key"),
    "forbidden": ("permission_error", None),
    "not_found": ("invalid_request_error", "not_found"),
    "model_not_found": ("invalid_request_error", "model_not_found"),
    "too_large": ("invalid_request_error", "request_too_large"),
    "request_timeout": ("invalid_request_error", "request_timeout"),
    "rate_limited": ("rate_limit_error", "rate_limit_exceeded"),
    "overloaded": ("server_error", "overloaded"),
    "upstream_failure": ("server_error", "upstream_error"),
    "upstream_timeout": ("server_error", "timeout"),
    # A backend's 4xx that the client caused: its own message, reported as the client's error.
    "upstream_rejected": ("invalid_request_error", None),
    "internal": ("server_error", None),
}
_FALLBACK = _SHAPES["internal"]


def encode_error(error: MindRouterError) -> dict[str, Any]:
    """`{"error": {"message", "type", "param", "code"}}` for any gateway error."""
    kind, code = _SHAPES.get(error.kind, _FALLBACK)
    param: str | None = None
    if isinstance(error, InvalidRequest):
        param = error.param
    elif isinstance(error, ModelNotFound):
        param = "model"
    return {"error": {"message": error.message, "type": kind, "param": param, "code": code}}


def encode_error_event(error: MindRouterError) -> bytes:
    """The error as one SSE data line, the in-band ending of a stream that already started."""
    return b"data: " + orjson.dumps(encode_error(error)) + b"\n\n"
