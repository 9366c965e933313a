"""Error bodies in every engine's shape, and statuses, map onto the error tree (pure)."""

from __future__ import annotations

import pytest

from mindrouter.backends.failures import error_from_status, read_error_body
from mindrouter.errors import (
    ContextLengthExceeded,
    ModelNotFound,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)


@pytest.mark.parametrize(
    ("raw", "message", "kind"),
    [
        (
            b'{"error":{"message":"bad","type":"BadRequestError","code":400}}',
            "bad",
            "BadRequestError",
        ),
        (
            b'{"object":"error","message":"old","type":"BadRequestError","code":400}',
            "old",
            "BadRequestError",
        ),
        (b'{"error":"model \\"x\\" not found"}', 'model "x" not found', None),
        (b'{"detail":"Not Found"}', "Not Found", None),
        (
            b'{"error":{"message":"m","code":"context_length_exceeded"}}',
            "m",
            "context_length_exceeded",
        ),
        (b"plain text failure", "plain text failure", None),
        (b"", "no error message", None),
    ],
)
def test_error_bodies(raw: bytes, message: str, kind: str | None) -> None:
    body = read_error_body(raw)
    assert (body.message, body.type) == (message, kind)


def test_status_mapping() -> None:
    def err(status: int, raw: bytes = b'{"error":"x"}') -> Exception:
        return error_from_status(status, raw, "m", "b")

    assert isinstance(err(404, b'{"error":"model not found"}'), ModelNotFound)
    assert isinstance(err(404, b"Not Found"), UpstreamRejected)
    assert isinstance(err(408), UpstreamTimeout)
    assert isinstance(
        err(400, b'{"error":{"message":"m","code":"context_length_exceeded"}}'),
        ContextLengthExceeded,
    )
    for status in (401, 403, 429, 500, 502, 503, 529):
        e = err(status)
        assert isinstance(e, UpstreamUnavailable)
        assert e.status == status
    rejected = err(409, b'{"error":{"message":"conflict"}}')
    assert isinstance(rejected, UpstreamRejected)
    assert (rejected.message, rejected.status) == ("conflict", 409)
