"""Errors to HTTP responses: the status from the error's kind, the body from the dialect."""

from __future__ import annotations

import math
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from mindrouter.dialects import anthropic as anthropic_dialect
from mindrouter.dialects import ollama as ollama_dialect
from mindrouter.dialects import openai as openai_dialect
from mindrouter.errors import MindRouterError, RateLimited, UpstreamRejected
from mindrouter.pipeline.context import Dialect

# Waits longer than this are not worth an automatic retry by the client's SDK.
MAX_SDK_RETRY_WAIT = 60

STATUS_BY_KIND: dict[str, int] = {
    "invalid_request": 400,
    "context_length_exceeded": 400,
    "unauthenticated": 401,
    "forbidden": 403,
    "not_found": 404,
    "model_not_found": 404,
    "too_large": 413,
    "request_timeout": 408,
    "rate_limited": 429,
    "overloaded": 503,
    "upstream_failure": 502,
    "upstream_timeout": 504,
    "internal": 500,
}


def status_for(error: MindRouterError, dialect: Dialect) -> int:
    if isinstance(error, UpstreamRejected):
        return error.status
    if error.kind == "overloaded" and dialect == "anthropic":
        return 529
    return STATUS_BY_KIND.get(error.kind, 500)


def dialect_for_path(path: str) -> Dialect:
    """The dialect of an error found before a route took the request (no such endpoint, …)."""
    if path.startswith(("/anthropic/", "/v1/messages")):
        return "anthropic"
    if path.startswith("/api/"):
        return "ollama"
    return "openai"


def error_body(error: MindRouterError, dialect: Dialect, request_id: str) -> dict[str, Any]:
    if dialect == "anthropic":
        return anthropic_dialect.encode_error(error, request_id=request_id)
    if dialect == "ollama":
        return ollama_dialect.encode_error(error)
    return openai_dialect.encode_error(error)


def error_response(error: MindRouterError, dialect: Dialect, request_id: str) -> Response:
    status = status_for(error, dialect)
    headers = {"x-request-id": request_id}
    if dialect == "anthropic":
        headers["request-id"] = request_id
    if isinstance(error, RateLimited):
        # Whole seconds, at least 1: SDKs sleep for exactly what the header says.
        wait = max(1, math.ceil(error.retry_after))
        headers["retry-after"] = str(wait)
        if wait > MAX_SDK_RETRY_WAIT:
            # A used-up budget frees only when the period ends; an SDK that obeyed would sleep
            # for days (the anthropic SDK has no cap), so tell it not to retry at all.
            headers["x-should-retry"] = "false"
    body = orjson.dumps(error_body(error, dialect, request_id))
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def request_id_of(request: Request) -> str:
    rid = getattr(request.state, "request_id", None)
    if isinstance(rid, str):
        return rid
    from mindrouter.pipeline.context import new_request_id

    rid = new_request_id()
    request.state.request_id = rid
    return rid
