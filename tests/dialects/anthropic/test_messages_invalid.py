"""Malformed Messages bodies: always an InvalidRequest that names the field, never anything else."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindrouter.dialects.anthropic import decode_count_tokens_request, decode_messages_request
from mindrouter.errors import InvalidRequest

KEY = b"k"
TOOL = {"name": "f", "input_schema": {"type": "object"}}


def valid() -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 2048,
        "system": [{"type": "text", "text": "sys"}],
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t", "signature": "s"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="},
                    },
                ],
            },
        ],
        "tools": [copy.deepcopy(TOOL)],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "temperature": 0.5,
        "stop_sequences": ["x"],
        "metadata": {"user_id": "u"},
        "output_config": {"effort": "low"},
    }


def with_(path: str, value: object, **top: Any) -> dict[str, Any]:
    """The valid body with the value at a dotted path replaced (or removed, for DELETE), and
    the top-level fields in `top` set."""
    body = valid()
    body.update(copy.deepcopy(top))
    keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
    target: Any = body
    for key in keys[:-1]:
        target = target[key]
    if value is DELETE:
        del target[keys[-1]]
    else:
        target[keys[-1]] = copy.deepcopy(value)
    return body


DELETE = object()
IMG = "messages.2.content.1"

CASES: list[tuple[object, str | None, str]] = [
    ([], None, "JSON object"),
    ("text", None, "JSON object"),
    (with_("model", DELETE), "model", "required"),
    (with_("model", ""), "model", "empty"),
    (with_("model", 7), "model", "string"),
    (with_("max_tokens", DELETE), "max_tokens", "required"),
    (with_("max_tokens", 0), "max_tokens", "at least 1"),
    (with_("max_tokens", "100"), "max_tokens", "integer"),
    (with_("max_tokens", True), "max_tokens", "integer"),
    (with_("messages", []), "messages", "at least one"),
    (with_("messages", {"role": "user"}), "messages", "array"),
    (with_("messages.0.role", "developer"), "messages.0.role", "'user', 'assistant', 'system'"),
    (
        with_("messages.0", {"role": "system", "content": [{"type": "image"}]}),
        "messages.0.content.0.type",
        "only text blocks",
    ),
    (
        with_("messages.0", {"role": "system", "content": "x", "clear_at": "later"}),
        "messages.0.clear_at",
        "'never'",
    ),
    (with_("messages.0.content", DELETE), "messages.0.content", "required"),
    (with_("messages.0.content", []), "messages.0.content", "at least one"),
    (with_("messages.0.content", 5), "messages.0.content", "string or an array"),
    (with_("messages.1.content.0.type", "bogus"), "messages.1.content.0.type", "unknown"),
    (with_("messages.1.content.0", "text"), "messages.1.content.0", "object"),
    (
        with_("messages.0.content", [{"type": "document", "source": {}}]),
        "messages.0.content.0.source.type",
        "required",
    ),
    (
        with_("messages.0.content", [{"type": "document", "source": {"type": "pdf"}}]),
        "messages.0.content.0.source.type",
        "'base64'",
    ),
    (
        with_("messages.0.content", [{"type": "text", "text": "x", "cache_control": "on"}]),
        "messages.0.content.0.cache_control",
        "object",
    ),
    (
        with_("messages.0.content", [{"type": "text", "text": "x", "cache_control": {}}]),
        "messages.0.content.0.cache_control.type",
        "required",
    ),
    (with_("context_management", []), "context_management", "object"),
    (with_("service_tier", 1), "service_tier", "string"),
    (with_("mcp_servers", {}), "mcp_servers", "array"),
    (
        with_("messages.0.content", [{"type": "tool_use", "id": "x", "name": "f", "input": {}}]),
        "messages.0.content.0.type",
        "assistant messages",
    ),
    (
        with_("messages.1.content", [{"type": "tool_result", "tool_use_id": "t1"}]),
        "messages.1.content.0.type",
        "user messages",
    ),
    (with_("messages.0.content", [{"type": "text"}]), "messages.0.content.0.text", "required"),
    (with_("messages.1.content.1.input", "{}"), "messages.1.content.1.input", "object"),
    (with_("messages.1.content.1.id", ""), "messages.1.content.1.id", "empty"),
    (with_("messages.1.content.0.signature", 3), "messages.1.content.0.signature", "string"),
    (with_("messages.2.content.0.tool_use_id", "nope"), "messages.2.content.0.tool_use_id", "nope"),
    (with_("messages.2.content.0.is_error", "yes"), "messages.2.content.0.is_error", "boolean"),
    (
        with_("messages.2.content.0.content", [{"type": "tool_use"}]),
        "messages.2.content.0.content.0.type",
        "text, image",
    ),
    (with_(f"{IMG}.source.media_type", "image/tiff"), f"{IMG}.source.media_type", "image/png"),
    (with_(f"{IMG}.source.data", "data:image/png;base64,AAAA"), f"{IMG}.source.data", "base64"),
    (with_(f"{IMG}.source.type", "file"), f"{IMG}.source.type", "'base64', 'url'"),
    (with_(f"{IMG}.source", DELETE), f"{IMG}.source", "required"),
    (with_("system", 5), "system", "array"),
    (with_("system", [{"type": "image"}]), "system.0.type", "text blocks"),
    (with_("temperature", 1.5), "temperature", "between 0 and 1"),
    (with_("temperature", "hot"), "temperature", "number"),
    (with_("top_p", -0.1), "top_p", "between 0 and 1"),
    (with_("top_k", -1), "top_k", "at least 0"),
    (with_("stop_sequences", "STOP"), "stop_sequences", "array"),
    (with_("stop_sequences", ["a", 1]), "stop_sequences.1", "string"),
    (with_("stream", "yes"), "stream", "boolean"),
    (with_("metadata", "u"), "metadata", "object"),
    (with_("metadata", {"user_id": 5}), "metadata.user_id", "string"),
    (with_("tools", {"name": "f"}), "tools", "array"),
    (with_("tools.0.input_schema", DELETE), "tools.0.input_schema", "required"),
    (with_("tools.0.name", ""), "tools.0.name", "empty"),
    (with_("tools", [TOOL, TOOL]), "tools.1.name", "unique"),
    (
        with_(
            "tool_choice",
            {"type": "tool", "name": "web_search"},
            tools=[TOOL, {"type": "web_search_20250305", "name": "web_search"}],
        ),
        "tool_choice.name",
        "server tool",
    ),
    (with_("tools.0.defer_loading", "yes"), "tools.0.defer_loading", "boolean"),
    (with_("tool_choice", {"type": "sometimes"}), "tool_choice.type", "'auto'"),
    (with_("tool_choice", {"type": "tool"}), "tool_choice.name", "required"),
    (with_("tool_choice", {"type": "tool", "name": "g"}), "tool_choice.name", "no tool named"),
    (
        with_("tool_choice", {"type": "auto", "disable_parallel_tool_use": "yes"}),
        "tool_choice.disable_parallel_tool_use",
        "boolean",
    ),
    (with_("thinking", {"type": "on"}), "thinking.type", "'enabled'"),
    (with_("thinking", {"type": "enabled"}), "thinking.budget_tokens", "required"),
    (with_("thinking.budget_tokens", 512), "thinking.budget_tokens", "at least 1024"),
    (with_("thinking.budget_tokens", 4096), "thinking.budget_tokens", "less than max_tokens"),
    (with_("thinking.display", "full"), "thinking.display", "'omitted'"),
    (with_("output_config.effort", "extreme"), "output_config.effort", "'xhigh'"),
    (with_("output_config", {"format": {"type": "json"}}), "output_config.format.type", "json"),
    (
        with_("output_config", {"format": {"type": "json_schema"}}),
        "output_config.format.schema",
        "required",
    ),
]


def test_the_baseline_body_is_valid() -> None:
    decode_messages_request(valid(), signing_key=KEY)


@pytest.mark.parametrize(("body", "param", "fragment"), CASES)
def test_malformed_body_names_the_field(body: object, param: str | None, fragment: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_messages_request(copy.deepcopy(body), signing_key=KEY)
    assert caught.value.param == param
    if param is not None:
        assert caught.value.message.startswith(f"{param}: ")
    assert fragment in caught.value.message


def test_count_tokens_still_checks_max_tokens_when_sent() -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_count_tokens_request(with_("max_tokens", -5), signing_key=KEY)
    assert caught.value.param == "max_tokens"


def test_huge_numbers_are_reported_not_crashed_on() -> None:
    with pytest.raises(InvalidRequest, match="too large"):
        decode_messages_request(with_("temperature", 10**5000), signing_key=KEY)
    body = with_("max_tokens", 10**5000)
    body["thinking"]["budget_tokens"] = 10**5001
    with pytest.raises(InvalidRequest, match=r"max_tokens: is out of range"):
        decode_messages_request(body, signing_key=KEY)
    with pytest.raises(InvalidRequest, match=r"max_tokens: is out of range"):
        decode_messages_request(with_("max_tokens", 1e30), signing_key=KEY)


def test_tool_input_beyond_64_bit_integers_still_serialises() -> None:
    body = with_("messages.1.content.1.input", {"big": 2**80})
    req = decode_messages_request(body, signing_key=KEY)
    assert req.messages[2].tool_calls[0].arguments == f'{{"big":{2**80}}}'


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def _only_invalid_request(body: object) -> None:
    for decode in (decode_messages_request, decode_count_tokens_request):
        try:
            decode(body, signing_key=KEY)
        except InvalidRequest as error:
            assert error.message


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_arbitrary_json_raises_only_invalid_request(body: object) -> None:
    _only_invalid_request(body)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _paths(item, (*prefix, i))
    return found


PATHS = _paths(valid())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(PATHS), JSON), min_size=1, max_size=3))
def test_valid_body_with_arbitrary_json_spliced_in_raises_only_invalid_request(
    edits: list[tuple[tuple[Any, ...], object]],
) -> None:
    body = valid()
    for path, value in edits:
        target: Any = body
        try:
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit replaced a parent of this path
    _only_invalid_request(body)
