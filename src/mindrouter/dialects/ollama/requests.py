"""Decode /api/chat and /api/generate bodies into canonical requests.

Unlike the ollama SDK (which always sends `stream` explicitly), the server streams when `stream`
is absent, so that is the default here. Fields that steer only Ollama's own runner are accepted
after validation and otherwise ignored: `keep_alive` (the gateway decides what stays loaded, see
lifecycle for the load/unload calls), `template`, `context` (deprecated token ids from an
earlier reply), `truncate`, `shift` and the log-probability switches.
"""

from __future__ import annotations

from mindrouter.canonical import (
    ChatRequest,
    CompletionRequest,
    Message,
    Part,
    TextPart,
    text_message,
)
from mindrouter.dialects.ollama.fields import (
    JSONObject,
    as_int,
    as_object,
    field,
    invalid,
    opt_bool,
    opt_list,
    opt_str,
    req_str,
)
from mindrouter.dialects.ollama.lifecycle import parse_keep_alive
from mindrouter.dialects.ollama.messages import decode_images, decode_messages
from mindrouter.dialects.ollama.params import (
    check_flags,
    check_logprobs,
    decode_format,
    decode_options,
    decode_think,
)
from mindrouter.dialects.ollama.tools import decode_tools


def decode_chat_request(body: object) -> ChatRequest:
    """A /api/chat body. An empty `messages` list is valid: see `chat_load_action`."""
    obj = as_object(body, "")
    model = req_str(obj, "model", "")
    messages = decode_messages(opt_list(obj, "messages", "") or [])
    tools = decode_tools(obj)
    response_format = decode_format(obj)
    reasoning = decode_think(obj)
    sampling, extra = decode_options(obj)
    _check_common(obj)
    check_flags(obj, "truncate", "shift")
    return ChatRequest(
        model=model,
        messages=messages,
        sampling=sampling,
        response_format=response_format,
        reasoning=reasoning,
        tools=tools,
        stream=_stream(obj),
        extra=extra,
    )


def decode_generate_request(body: object) -> ChatRequest | CompletionRequest:
    """A /api/generate body.

    With `raw` the prompt goes to the model untemplated, so it becomes a CompletionRequest; so
    does a templated request with a `suffix` (fill-in-the-middle), the canonical form's only
    place for a suffix. Everything else is a one-turn chat: the `system` text, then the prompt
    with its images as the user's message. `think` has nothing to act on without a template,
    so it is validated and dropped for completions. An empty prompt is a load call: see
    `generate_load_action`.
    """
    obj = as_object(body, "")
    model = req_str(obj, "model", "")
    prompt = opt_str(obj, "prompt", "") or ""
    suffix = opt_str(obj, "suffix", "") or ""
    system = opt_str(obj, "system", "") or ""
    template = opt_str(obj, "template", "") or ""
    raw = opt_bool(obj, "raw", "") or False
    context = _context(obj)
    images = decode_images(obj.get("images"), "images")
    response_format = decode_format(obj)
    reasoning = decode_think(obj)
    sampling, extra = decode_options(obj)
    _check_common(obj)
    stream = _stream(obj)

    if raw:
        # Raw prompts are sent as they are, so there is nothing to apply these to (Ollama's rule).
        for name, given in (("system", system), ("template", template), ("context", context)):
            if given:
                raise invalid(name, "is not allowed when raw is true")
    if raw or suffix:
        what = "raw is true" if raw else "suffix is given"
        if images:
            raise invalid("images", f"are not supported when {what}")
        if response_format is not None:
            raise invalid("format", f"is not supported when {what}")
        if system:
            raise invalid("system", f"is not supported when {what}")
        return CompletionRequest(
            model=model,
            prompt=[prompt],
            sampling=sampling,
            suffix=suffix or None,
            stream=stream,
            extra=extra,
        )

    messages: list[Message] = [text_message("system", system)] if system else []
    parts: list[Part] = [TextPart(prompt)] if prompt else []
    parts.extend(images)
    messages.append(Message(role="user", content=parts))
    return ChatRequest(
        model=model,
        messages=messages,
        sampling=sampling,
        response_format=response_format,
        reasoning=reasoning,
        stream=stream,
        extra=extra,
    )


def _stream(obj: JSONObject) -> bool:
    stream = opt_bool(obj, "stream", "")
    return True if stream is None else stream


def _check_common(obj: JSONObject) -> None:
    parse_keep_alive(obj.get("keep_alive"))
    check_logprobs(obj)


def _context(obj: JSONObject) -> list[int]:
    items = opt_list(obj, "context", "") or []
    return [as_int(item, field("context", i)) for i, item in enumerate(items)]
