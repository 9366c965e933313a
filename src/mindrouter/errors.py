"""The gateway's one error tree.

    MindRouterError                      anything the gateway reports to a client
    ├── ClientError                      the caller can fix it
    │   ├── InvalidRequest               malformed body, wrong types, bad values
    │   │   └── ContextLengthExceeded    the input cannot fit the model's context
    │   ├── Unauthenticated              missing, malformed, unknown, revoked or expired key
    │   ├── Forbidden                    authenticated, but not allowed (e.g. not an admin key)
    │   ├── NotFound                     an unknown route or object
    │   │   └── ModelNotFound            the model is not served by any backend
    │   ├── PayloadTooLarge              the body is over the configured limit
    │   ├── RequestTimeout               the body stopped arriving before it was complete
    │   └── RateLimited                  over a budget, rate or concurrency limit
    ├── Overloaded                       no backend capacity within the wait deadline
    ├── UpstreamError                    a backend failed us
    │   ├── UpstreamUnavailable          could not connect, connection dropped, 5xx
    │   ├── UpstreamTimeout              no answer (or no first byte) in time
    │   └── UpstreamRejected             a backend 4xx the client caused
    └── InternalError                    a bug or an unexpected failure inside the gateway

Classes carry data only. The status line and body for each dialect are decided at the edge
(`dialects/*/errors.py` for bodies, `http/` for statuses) from `kind`, so this module stays pure.
"""

from __future__ import annotations

from typing import ClassVar


class MindRouterError(Exception):
    kind: ClassVar[str] = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ClientError(MindRouterError):
    kind = "invalid_request"


class InvalidRequest(ClientError):
    kind = "invalid_request"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class ContextLengthExceeded(InvalidRequest):
    kind = "context_length_exceeded"

    def __init__(
        self, message: str, input_tokens: int | None = None, context_length: int | None = None
    ) -> None:
        super().__init__(message, param="messages")
        self.input_tokens = input_tokens
        self.context_length = context_length


class Unauthenticated(ClientError):
    kind = "unauthenticated"


class Forbidden(ClientError):
    kind = "forbidden"


class NotFound(ClientError):
    kind = "not_found"


class ModelNotFound(NotFound):
    kind = "model_not_found"

    def __init__(self, model: str, message: str | None = None) -> None:
        super().__init__(message or f"The model '{model}' does not exist or is not served here.")
        self.model = model


class PayloadTooLarge(ClientError):
    kind = "too_large"


class RequestTimeout(ClientError):
    kind = "request_timeout"


class RateLimited(ClientError):
    kind = "rate_limited"

    def __init__(self, message: str, retry_after: float = 1.0, limit: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.limit = limit


class Overloaded(MindRouterError):
    kind = "overloaded"


class UpstreamError(MindRouterError):
    kind = "upstream_failure"

    def __init__(self, message: str, backend: str | None = None) -> None:
        super().__init__(message)
        self.backend = backend


class UpstreamUnavailable(UpstreamError):
    kind = "upstream_failure"

    def __init__(self, message: str, backend: str | None = None, status: int | None = None):
        super().__init__(message, backend)
        self.status = status


class UpstreamTimeout(UpstreamError):
    kind = "upstream_timeout"


class UpstreamRejected(UpstreamError):
    """A 4xx from a backend that retrying elsewhere cannot fix; passed to the client as-is."""

    kind = "upstream_rejected"

    def __init__(self, message: str, status: int, backend: str | None = None) -> None:
        super().__init__(message, backend)
        self.status = status


class InternalError(MindRouterError):
    kind = "internal"
