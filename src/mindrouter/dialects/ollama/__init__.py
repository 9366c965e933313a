"""The Ollama client dialect: Ollama's native /api wire format.

Decoders turn request bodies into canonical requests and raise `InvalidRequest` naming the field
at fault; encoders turn canonical results and stream events into Ollama's JSON objects and NDJSON
lines. Pure code: the clock, timestamps and model listings come in as parameters.
"""

from mindrouter.dialects.ollama.embeddings import (
    decode_embed_request,
    decode_embeddings_request,
    encode_embed_response,
    encode_embeddings_response,
)
from mindrouter.dialects.ollama.errors import encode_error
from mindrouter.dialects.ollama.lifecycle import (
    LoadAction,
    chat_load_action,
    encode_chat_load_response,
    encode_generate_load_response,
    generate_load_action,
    parse_keep_alive,
)
from mindrouter.dialects.ollama.models import (
    ModelView,
    decode_show_request,
    encode_ps,
    encode_show,
    encode_tags,
    encode_version,
)
from mindrouter.dialects.ollama.requests import decode_chat_request, decode_generate_request
from mindrouter.dialects.ollama.responses import (
    done_reason,
    encode_chat_response,
    encode_generate_response,
)
from mindrouter.dialects.ollama.stream import ChatStreamEncoder, GenerateStreamEncoder
from mindrouter.dialects.ollama.timing import Timings, format_rfc3339

__all__ = [
    "ChatStreamEncoder",
    "GenerateStreamEncoder",
    "LoadAction",
    "ModelView",
    "Timings",
    "chat_load_action",
    "decode_chat_request",
    "decode_embed_request",
    "decode_embeddings_request",
    "decode_generate_request",
    "decode_show_request",
    "done_reason",
    "encode_chat_load_response",
    "encode_chat_response",
    "encode_embed_response",
    "encode_embeddings_response",
    "encode_error",
    "encode_generate_load_response",
    "encode_generate_response",
    "encode_ps",
    "encode_show",
    "encode_tags",
    "encode_version",
    "format_rfc3339",
    "generate_load_action",
    "parse_keep_alive",
]
