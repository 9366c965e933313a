"""The canonical form: the one request/response/event shape spoken between dialects and backends.

Pure data: no I/O, no framework imports. Dialects decode into it and encode out of it; backend
adapters do the same on the engine side.
"""

from mindrouter.canonical.assemble import ChatAssembler, assemble
from mindrouter.canonical.content import (
    ImagePart,
    Message,
    Part,
    Role,
    TextPart,
    ToolCall,
    sniff_image_type,
    text_message,
)
from mindrouter.canonical.events import (
    Done,
    Finish,
    ReasoningDelta,
    ReasoningSignature,
    StreamEvent,
    StreamFailed,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
)
from mindrouter.canonical.request import (
    EFFORTS,
    AnyRequest,
    ChatRequest,
    CompletionRequest,
    Effort,
    EmbeddingRequest,
    Modality,
    Reasoning,
    RelevanceRequest,
    ResponseFormat,
    Sampling,
    Tool,
    ToolChoice,
)
from mindrouter.canonical.response import (
    ChatResult,
    Choice,
    EmbeddingResult,
    FinishReason,
    RelevanceResult,
    Usage,
)

__all__ = [
    "EFFORTS",
    "AnyRequest",
    "ChatAssembler",
    "ChatRequest",
    "ChatResult",
    "Choice",
    "CompletionRequest",
    "Done",
    "Effort",
    "EmbeddingRequest",
    "EmbeddingResult",
    "Finish",
    "FinishReason",
    "ImagePart",
    "Message",
    "Modality",
    "Part",
    "Reasoning",
    "ReasoningDelta",
    "ReasoningSignature",
    "RelevanceRequest",
    "RelevanceResult",
    "ResponseFormat",
    "Role",
    "Sampling",
    "StreamEvent",
    "StreamFailed",
    "TextDelta",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolCallArgs",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolChoice",
    "Usage",
    "assemble",
    "sniff_image_type",
    "text_message",
]
