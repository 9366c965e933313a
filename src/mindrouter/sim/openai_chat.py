"""Decode an OpenAI-shaped chat request (as vLLM and llama.cpp accept it) into neutral terms.

Covers messages and content parts, tools and tool_choice, structured output (response_format and
each engine's own extension) and the thinking switches. Unknown fields are ignored, as the
engines do; invalid values raise `SimError(400)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from mindrouter.sim.engine import SimError
from mindrouter.sim.openai_decode import (
    Dialect,
    decode_stop,
    int_field,
    json_object,
    model_field,
    stream_options,
)
from mindrouter.sim.text import STOP_TEST_MARKER, ToolSpec, calls_tool
from mindrouter.sim.tokenizer import ChatMessage, tool_calls_text

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


@dataclass
class ChatRequest:
    model: str
    messages: list[ChatMessage]
    tools: list[Any]
    tool: ToolSpec | None
    stream: bool
    include_usage: bool
    continuous_usage: bool
    max_tokens: int | None
    stop: list[str]
    n: int
    thinking: bool | None
    include_reasoning: bool
    json_mode: bool
    json_schema: Mapping[str, Any] | None
    choice: str | None
    ignore_eos: bool

    @property
    def images(self) -> int:
        return sum(message.images for message in self.messages)

    @property
    def stop_test(self) -> bool:
        users = [m for m in self.messages if m.role == "user"]
        return bool(users) and STOP_TEST_MARKER in users[-1].text


def _content(content: Any, index: int) -> tuple[str, int]:
    """Text and image count of a message's content (a string or a list of parts)."""
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    if not isinstance(content, list):
        raise SimError(400, f"messages[{index}].content must be a string or a list of parts")
    texts: list[str] = []
    images = 0
    for part in content:
        if not isinstance(part, dict):
            raise SimError(400, f"messages[{index}].content parts must be objects")
        kind = part.get("type")
        if kind in ("text", "input_text", "refusal"):
            texts.append(str(part.get("text", part.get("refusal", ""))))
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str) or not url.startswith(("data:", "http://", "https://")):
                raise SimError(400, f"messages[{index}]: image_url.url must be a data: or http URL")
            if url.startswith("data:") and ";base64," not in url:
                raise SimError(400, f"messages[{index}]: only base64 data URLs are supported")
            images += 1
    return "".join(texts), images


def decode_messages(raw: Any) -> list[ChatMessage]:
    if not isinstance(raw, list) or not raw:
        raise SimError(400, "messages must be a non-empty list", param="messages")
    messages: list[ChatMessage] = []
    for index, message in enumerate(raw):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise SimError(400, f"messages[{index}] must be an object with a valid role")
        text, images = _content(message.get("content"), index)
        calls = tool_calls_text(message.get("tool_calls")) if message["role"] == "assistant" else ""
        messages.append(ChatMessage(str(message["role"]), text, images, calls))
    return messages


def _tool_to_call(
    body: Mapping[str, Any], messages: list[ChatMessage]
) -> tuple[list[Any], ToolSpec | None]:
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none", "auto"):
            raise SimError(
                400, "When using `tool_choice`, `tools` must be set.", param="tool_choice"
            )
        return [], None
    if not isinstance(tools, list):
        raise SimError(400, "tools must be a list", param="tools")
    specs: list[ToolSpec] = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise SimError(400, "each tool needs function.name", param="tools")
        parameters = function.get("parameters")
        specs.append(ToolSpec(function["name"], parameters if isinstance(parameters, dict) else {}))
    if not specs or choice == "none" or not calls_tool([m.role for m in messages]):
        return tools, None
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        for spec in specs:
            if spec.name == name:
                return tools, spec
        raise SimError(400, f"Tool '{name}' has not been passed in `tools`.", param="tool_choice")
    if choice not in (None, "auto", "required"):
        raise SimError(400, f"invalid tool_choice {choice!r}", param="tool_choice")
    return tools, specs[0]


def _schema(value: Any) -> Mapping[str, Any] | None:
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise SimError(400, "the JSON schema is not valid JSON") from None
    return value if isinstance(value, dict) else None


def _structured(
    body: Mapping[str, Any], dialect: Dialect
) -> tuple[bool, Mapping[str, Any] | None, str | None]:
    """(json_mode, schema, choice) from response_format and the engine's own extensions."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        kind = fmt.get("type")
        if kind == "json_schema":
            inner = fmt.get("json_schema")
            schema = _schema(inner.get("schema") if isinstance(inner, dict) else fmt.get("schema"))
            return True, schema or {"type": "object"}, None
        if kind == "json_object":
            return True, _schema(fmt.get("schema")) if dialect == "llamacpp" else None, None
        if kind not in (None, "text"):
            raise SimError(
                400, f"unsupported response_format type {kind!r}", param="response_format"
            )
    if dialect == "vllm":
        structured = body.get("structured_outputs")
        if isinstance(structured, dict):
            if "json" in structured:
                return True, _schema(structured["json"]) or {"type": "object"}, None
            if structured.get("json_object"):
                return True, None, None
            options = structured.get("choice")
            if isinstance(options, list) and options:
                return False, None, str(options[0])
    elif body.get("json_schema") is not None:
        return True, _schema(body["json_schema"]) or {"type": "object"}, None
    return False, None, None


def _thinking(body: Mapping[str, Any]) -> bool | None:
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict):
        for key in ("enable_thinking", "thinking"):
            if isinstance(kwargs.get(key), bool):
                return bool(kwargs[key])
    effort = body.get("reasoning_effort")
    if isinstance(effort, str):
        return effort != "none"
    return None


def decode_chat(body: Any, dialect: Dialect) -> ChatRequest:
    body = json_object(body)
    messages = decode_messages(body.get("messages"))
    tools, tool = _tool_to_call(body, messages)
    stream, include_usage, continuous = stream_options(body)
    minimum = 1 if dialect == "vllm" else -1
    max_tokens = int_field(body, "max_completion_tokens", minimum)
    if max_tokens is None:
        max_tokens = int_field(body, "max_tokens", minimum)
    if max_tokens is None and dialect == "llamacpp":
        max_tokens = int_field(body, "n_predict", -1)
    if max_tokens is not None and max_tokens < 0:
        max_tokens = None
    n = int_field(body, "n", 1) or 1
    if dialect == "llamacpp" and n != 1:
        raise SimError(400, "Only one completion choice is allowed", param="n")
    json_mode, schema, choice = _structured(body, dialect)
    return ChatRequest(
        model=model_field(body),
        messages=messages,
        tools=tools,
        tool=tool,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous,
        max_tokens=max_tokens,
        stop=decode_stop(body.get("stop")),
        n=n,
        thinking=_thinking(body),
        include_reasoning=body.get("include_reasoning") is not False,
        json_mode=json_mode,
        json_schema=schema,
        choice=choice,
        ignore_eos=body.get("ignore_eos") is True,
    )
