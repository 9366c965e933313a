"""Gateway errors become OpenAI error bodies with the type and code OpenAI uses for each status."""

from __future__ import annotations

import orjson
import pytest

from mindrouter.dialects.openai import encode_error, encode_error_event
from mindrouter.errors import (
    ContextLengthExceeded,
    Forbidden,
    InternalError,
    InvalidRequest,
    MindRouterError,
    ModelNotFound,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    RateLimited,
    Unauthenticated,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)

CASES: list[tuple[MindRouterError, str, str | None, str | None]] = [
    (
        InvalidRequest("temperature: bad", param="temperature"),
        "invalid_request_error",
        None,
        "temperature",
    ),
    (
        ContextLengthExceeded("too long"),
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    ),
    (Unauthenticated("no key"), "authentication_error", "invalid_api_key", None),
    (Forbidden("admin only"), "permission_error", None, None),
    (NotFound("no route"), "invalid_request_error", "not_found", None),
    (ModelNotFound("qwen"), "invalid_request_error", "model_not_found", "model"),
    (PayloadTooLarge("big"), "invalid_request_error", "request_too_large", None),
    (RateLimited("slow down", retry_after=2), "rate_limit_error", "rate_limit_exceeded", None),
    (Overloaded("busy"), "server_error", "overloaded", None),
    (UpstreamUnavailable("down", backend="b1"), "server_error", "upstream_error", None),
    (UpstreamTimeout("slow"), "server_error", "timeout", None),
    (UpstreamRejected("bad grammar", status=400), "invalid_request_error", None, None),
    (InternalError("bug"), "server_error", None, None),
]


@pytest.mark.parametrize(("error", "type_", "code", "param"), CASES)
def test_error_bodies(
    error: MindRouterError, type_: str, code: str | None, param: str | None
) -> None:
    body = encode_error(error)
    assert body == {
        "error": {"message": error.message, "type": type_, "param": param, "code": code}
    }


def test_backend_message_passes_through() -> None:
    body = encode_error(UpstreamRejected("grammar is invalid at line 3", status=400))
    assert body["error"]["message"] == "grammar is invalid at line 3"


def test_error_event_is_one_sse_data_line() -> None:
    raw = encode_error_event(Overloaded("no capacity"))
    assert raw.startswith(b"data: {") and raw.endswith(b"\n\n") and raw.count(b"\n") == 2
    assert orjson.loads(raw[6:]) == encode_error(Overloaded("no capacity"))
