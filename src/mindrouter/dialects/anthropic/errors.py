"""Gateway errors in the Anthropic shape.

The same `error` object is the body of a failed response and the payload of an in-band
`event: error` in a stream. The HTTP status is the http layer's business; the SDK picks its
exception class from the status first and the `error.type` second, so the two must agree there.
"""

from __future__ import annotations

from typing import Any

from mindrouter.errors import MindRouterError

# Keyed by `MindRouterError.kind`. Anthropic has no separate type for a bad request that only
# showed up at the backend, or for an over-long context: both are the client's to fix.
ERROR_TYPES: dict[str, str] = {
    "invalid_request": "invalid_request_error",
    "context_length_exceeded": "invalid_request_error",
    "upstream_rejected": "invalid_request_error",
    "unauthenticated": "authentication_error",
    "forbidden": "permission_error",
    "not_found": "not_found_error",
    "model_not_found": "not_found_error",
    "too_large": "request_too_large",
    "request_timeout": "timeout_error",
    "rate_limited": "rate_limit_error",
    "overloaded": "overloaded_error",
    "upstream_failure": "api_error",
    "upstream_timeout": "timeout_error",
    "internal": "api_error",
}


def error_type(error: MindRouterError) -> str:
    """Anthropic's `error.type` for an error; anything unforeseen is the gateway's fault."""
    return ERROR_TYPES.get(error.kind, "api_error")


def error_object(error: MindRouterError) -> dict[str, str]:
    return {"type": error_type(error), "message": error.message}


def encode_error(error: MindRouterError, *, request_id: str) -> dict[str, Any]:
    """The body of a failed response: `{"type":"error","error":{…},"request_id":…}`."""
    return {"type": "error", "error": error_object(error), "request_id": request_id}
