"""The Anthropic Messages dialect: `/v1/messages` bodies in, canonical requests out, and back.

Pure: it reads parsed JSON and returns dicts or bytes; ids, time and keys come in as arguments.
- `decode`: request bodies (messages, count_tokens) → `ChatRequest`, strict validation.
- `messages`, `blocks`, `tools`, `thinking`: the parts of a request, and thinking signatures.
- `response`: a whole reply, a token count, the model list.
- `stream`: canonical events → server-sent events.
- `errors`: gateway errors → Anthropic error bodies.
"""

from mindrouter.dialects.anthropic.decode import (
    decode_count_tokens_request,
    decode_messages_request,
)
from mindrouter.dialects.anthropic.errors import encode_error
from mindrouter.dialects.anthropic.response import (
    encode_count_tokens_response,
    encode_messages_response,
    encode_model_list,
)
from mindrouter.dialects.anthropic.stream import MessagesStreamEncoder
from mindrouter.dialects.anthropic.thinking import sign_thinking, verify_thinking

__all__ = [
    "MessagesStreamEncoder",
    "decode_count_tokens_request",
    "decode_messages_request",
    "encode_count_tokens_response",
    "encode_error",
    "encode_messages_response",
    "encode_model_list",
    "sign_thinking",
    "verify_thinking",
]
