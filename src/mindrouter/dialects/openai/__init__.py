"""The OpenAI client dialect: `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`,
`/v1/models` and vLLM's `/v1/rerank` and `/v1/score` bodies decoded into the canonical form and
encoded back out of it.

Decoders take the parsed JSON body and raise `InvalidRequest` naming the offending parameter.
Encoders take canonical results or stream events plus the response id, creation time and model
name chosen by the caller. Error bodies follow §7.5; the HTTP status is chosen elsewhere.
"""

from mindrouter.dialects.openai.decode import (
    COMPLETION_DEFAULT_MAX_TOKENS,
    EncodingFormat,
    decode_chat_request,
    decode_completion_request,
    decode_embedding_request,
)
from mindrouter.dialects.openai.encode import (
    ReasoningField,
    encode_chat_response,
    encode_completion_response,
    encode_embedding_response,
    encode_model,
    encode_model_list,
    encode_usage,
)
from mindrouter.dialects.openai.errors import encode_error, encode_error_event
from mindrouter.dialects.openai.params import wants_usage
from mindrouter.dialects.openai.relevance import (
    RerankOptions,
    decode_rerank_request,
    decode_score_request,
    encode_rerank_response,
    encode_score_response,
)
from mindrouter.dialects.openai.stream import ChatStreamEncoder, CompletionStreamEncoder

__all__ = [
    "COMPLETION_DEFAULT_MAX_TOKENS",
    "ChatStreamEncoder",
    "CompletionStreamEncoder",
    "EncodingFormat",
    "ReasoningField",
    "RerankOptions",
    "decode_chat_request",
    "decode_completion_request",
    "decode_embedding_request",
    "decode_rerank_request",
    "decode_score_request",
    "encode_chat_response",
    "encode_completion_response",
    "encode_embedding_response",
    "encode_error",
    "encode_error_event",
    "encode_model",
    "encode_model_list",
    "encode_rerank_response",
    "encode_score_response",
    "encode_usage",
    "wants_usage",
]
