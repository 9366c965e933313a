"""The OpenAI Responses dialect: `/v1/responses` bodies decoded into the canonical form, and
canonical results and stream events encoded back as Responses objects and events.

Errors share the OpenAI error body (`dialects.openai.errors`); a failure after a stream started
becomes a `response.failed` event carrying the error.
"""

from mindrouter.dialects.responses.decode import (
    IGNORED,
    ResponsesOptions,
    decode_responses_request,
    peek_previous,
)
from mindrouter.dialects.responses.encode import (
    ResponseShape,
    encode_response,
    encode_usage,
    response_id_for,
)
from mindrouter.dialects.responses.items import decode_input, normalize_items
from mindrouter.dialects.responses.stream import ResponsesStreamEncoder

__all__ = [
    "IGNORED",
    "ResponseShape",
    "ResponsesOptions",
    "ResponsesStreamEncoder",
    "decode_input",
    "decode_responses_request",
    "encode_response",
    "encode_usage",
    "normalize_items",
    "peek_previous",
    "response_id_for",
]
