"""Malformed OpenAI bodies are refused with an InvalidRequest naming the field, and nothing else."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mindrouter.dialects.openai import (
    decode_chat_request,
    decode_completion_request,
    decode_embedding_request,
)
from mindrouter.errors import InvalidRequest

USER = {"role": "user", "content": "Hi"}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def chat(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [USER]}
    body.update(fields)
    return body


def with_message(message: object) -> dict[str, Any]:
    return chat(messages=[USER, message])


# (body, param, a fragment the message must contain)
BAD_CHAT: list[tuple[object, str | None, str]] = [
    ([1, 2], None, "must be a JSON object"),
    ("text", None, "must be a JSON object"),
    ({"messages": [USER]}, "model", "model: is required"),
    (chat(model=""), "model", "must not be empty"),
    (chat(model=7), "model", "must be a string"),
    ({"model": "m"}, "messages", "messages: is required"),
    (chat(messages=[]), "messages", "non-empty array"),
    (chat(messages="hi"), "messages", "must be an array"),
    (chat(messages=["hi"]), "messages[0]", "must be an object"),
    (with_message({"role": "robot", "content": "x"}), "messages[1].role", "'robot'"),
    (with_message({"content": "x"}), "messages[1].role", "got null"),
    (with_message({"role": "user"}), "messages[1].content", "is required"),
    (with_message({"role": "user", "content": 5}), "messages[1].content", "an integer"),
    (with_message({"role": "user", "content": []}), "messages[1].content", "non-empty"),
    (
        with_message({"role": "user", "content": [{"type": "foo"}]}),
        "messages[1].content[0]",
        "unknown content part type 'foo'",
    ),
    (
        with_message({"role": "user", "content": [{"text": "x"}]}),
        "messages[1].content[0]",
        "no 'type'",
    ),
    (
        with_message({"role": "user", "content": [{"type": "text", "text": 3}]}),
        "messages[1].content[0].text",
        "must be a string",
    ),
    (
        with_message(
            {
                "role": "user",
                "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}],
            }
        ),
        "messages[1].content[0]",
        "not supported",
    ),
    (
        with_message({"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}),
        "messages[1].content[0]",
        "not supported",
    ),
    (
        with_message({"role": "user", "content": [{"type": "image_url", "image_url": {}}]}),
        "messages[1].content[0].image_url.url",
        "is required",
    ),
    (
        with_message(
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}
        ),
        "messages[1].content[0].image_url.url",
        "http(s) URL or a data: URL",
    ),
    (
        with_message(
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "data:text/plain,hi"}}],
            }
        ),
        "messages[1].content[0].image_url.url",
        "data:image/",
    ),
    (
        with_message(
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,"}}],
            }
        ),
        "messages[1].content[0].image_url.url",
        "empty or not valid base64",
    ),
    (
        with_message(
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,%%not!!"}}
                ],
            }
        ),
        "messages[1].content[0].image_url.url",
        "empty or not valid base64",
    ),
    (
        with_message(
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "max"}}
                ],
            }
        ),
        "messages[1].content[0].image_url.detail",
        "'max'",
    ),
    (
        with_message({"role": "system", "content": [{"type": "image_url", "image_url": {}}]}),
        "messages[1].content[0]",
        "not allowed",
    ),
    (
        with_message({"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}),
        "messages[1].content[0]",
        "unknown content part type 'refusal'",
    ),
    (
        with_message({"role": "system", "content": [{"type": "refusal", "refusal": "no"}]}),
        "messages[1].content[0]",
        "not allowed",
    ),
    (with_message({"role": "tool", "content": "x"}), "messages[1].tool_call_id", "is required"),
    (
        with_message({"role": "assistant"}),
        "messages[1].content",
        "unless the message has tool_calls",
    ),
    (
        with_message(
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}
                ],
            }
        ),
        "messages[1].tool_calls[0].function.arguments",
        "JSON-encoded string",
    ),
    (
        with_message(
            {
                "role": "assistant",
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": ""}}],
            }
        ),
        "messages[1].tool_calls[0].id",
        "is required",
    ),
    (with_message({"role": "function", "content": "x"}), "messages[1].name", "is required"),
    (chat(temperature="hot"), "temperature", "must be a number, got a string"),
    (chat(temperature=True), "temperature", "a boolean"),
    (chat(temperature=2.5), "temperature", "between 0 and 2"),
    (chat(top_p=1.5), "top_p", "between 0 and 1"),
    (chat(n=0), "n", "between 1 and 128"),
    (chat(n=1.5), "n", "must be an integer"),
    (chat(max_tokens=0), "max_tokens", "at least 1"),
    (chat(max_completion_tokens="5"), "max_completion_tokens", "must be an integer"),
    (chat(max_tokens=True), "max_tokens", "a boolean"),
    (chat(seed=1.0), "seed", "must be an integer"),
    (chat(presence_penalty=3), "presence_penalty", "between -2 and 2"),
    (chat(repetition_penalty=0), "repetition_penalty", "greater than 0"),
    (chat(stop=["a", "b", "c", "d", "e"]), "stop", "at most 4"),
    (chat(stop=["a", 1]), "stop[1]", "must be a string"),
    (chat(stop=5), "stop", "string or an array"),
    (chat(stream="yes"), "stream", "must be a boolean"),
    (chat(stream_options={"include_usage": True}), "stream_options", "only allowed when stream"),
    (
        chat(stream=True, stream_options={"include_usage": 1}),
        "stream_options.include_usage",
        "boolean",
    ),
    (chat(tools=[{"type": "custom", "custom": {}}]), "tools[0].type", "only 'function'"),
    (chat(tools=[{"type": "function", "function": {}}]), "tools[0].function.name", "is required"),
    (chat(tools=[TOOL, TOOL]), "tools[1].function.name", "duplicate"),
    (chat(tools="f"), "tools", "must be an array"),
    (chat(tools=[TOOL], tool_choice="sometimes"), "tool_choice", "'sometimes'"),
    (chat(tool_choice="required"), "tool_choice", "at least one tool"),
    (
        chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "g"}}),
        "tool_choice",
        "'g', which is not among the tools",
    ),
    (
        chat(tools=[TOOL], tool_choice={"type": "allowed_tools"}),
        "tool_choice.type",
        "only 'function'",
    ),
    (chat(functions=[TOOL["function"]], tools=[TOOL]), "functions", "not both"),
    (chat(function_call="auto"), "function_call", "only allowed together with functions"),
    (chat(response_format={"type": "yaml"}), "response_format.type", "'yaml'"),
    (chat(response_format="json"), "response_format", "must be an object"),
    (chat(response_format={"type": "json_schema"}), "response_format.json_schema", "is required"),
    (
        chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}}),
        "response_format.json_schema.schema",
        "is required",
    ),
    (chat(reasoning_effort="extreme"), "reasoning_effort", "'extreme'"),
    (
        chat(chat_template_kwargs={"enable_thinking": "yes"}),
        "chat_template_kwargs.enable_thinking",
        "boolean",
    ),
    (chat(parallel_tool_calls="no"), "parallel_tool_calls", "boolean"),
    (chat(user=5), "user", "must be a string"),
]


@pytest.mark.parametrize(("body", "param", "fragment"), BAD_CHAT)
def test_bad_chat_bodies_name_the_field(body: object, param: str | None, fragment: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        decode_chat_request(body)
    assert info.value.param == param
    assert fragment in info.value.message
    if param is not None:
        assert info.value.message.startswith(f"{param}: ")


BAD_OTHER: list[tuple[str, object, str | None, str]] = [
    ("completion", {"model": "m"}, "prompt", "is required"),
    (
        "completion",
        {"model": "m", "prompt": [1, 2]},
        "prompt",
        "token id prompts are not supported",
    ),
    ("completion", {"model": "m", "prompt": [[1]]}, "prompt", "token id prompts"),
    ("completion", {"model": "m", "prompt": []}, "prompt", "empty"),
    ("completion", {"model": "m", "prompt": ["a", None]}, "prompt[1]", "must be a string"),
    ("completion", {"model": "m", "prompt": "x", "echo": "y"}, "echo", "boolean"),
    ("completion", {"model": "m", "prompt": "x", "logprobs": 9}, "logprobs", "between 0 and 5"),
    ("completion", {"prompt": "x"}, "model", "is required"),
    ("embedding", {"model": "m"}, "input", "is required"),
    ("embedding", {"model": "m", "input": ""}, "input", "empty string"),
    ("embedding", {"model": "m", "input": []}, "input", "empty array"),
    ("embedding", {"model": "m", "input": ["a", ""]}, "input[1]", "empty string"),
    ("embedding", {"model": "m", "input": ["a", 1]}, "input[1]", "must be a string"),
    ("embedding", {"model": "m", "input": [1, -2]}, "input[1]", "token id"),
    ("embedding", {"model": "m", "input": [[1], []]}, "input[1]", "empty array"),
    ("embedding", {"model": "m", "input": [[1], "a"]}, "input[1]", "array of token ids"),
    ("embedding", {"model": "m", "input": 3}, "input", "string or an array"),
    (
        "embedding",
        {"model": "m", "input": "a", "encoding_format": "int8"},
        "encoding_format",
        "'int8'",
    ),
    ("embedding", {"model": "m", "input": "a", "dimensions": 0}, "dimensions", "at least 1"),
]


@pytest.mark.parametrize(("endpoint", "body", "param", "fragment"), BAD_OTHER)
def test_bad_completion_and_embedding_bodies(
    endpoint: str, body: object, param: str | None, fragment: str
) -> None:
    decode = decode_completion_request if endpoint == "completion" else decode_embedding_request
    with pytest.raises(InvalidRequest) as info:
        decode(body)
    assert info.value.param == param
    assert fragment in info.value.message


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=10)
    | st.sampled_from(["user", "assistant", "tool", "function", "text", "image_url", "function"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["type", "text", "role", "content", "name", "url", "image_url", "id"])
            | st.text(max_size=6),
            inner,
            max_size=4,
        )
    ),
    max_leaves=8,
)
CHAT_KEYS = [
    "temperature", "top_p", "n", "stop", "seed", "max_tokens", "max_completion_tokens", "tools",
    "tool_choice", "functions", "function_call", "parallel_tool_calls", "response_format",
    "reasoning_effort", "chat_template_kwargs", "stream", "stream_options", "user", "top_k",
    "min_p", "repetition_penalty", "include_reasoning",
]  # fmt: skip
# Plausible values get past the first checks, so the fuzzing reaches the deeper ones too.
plausible = (
    st.floats(min_value=-1, max_value=3)
    | st.integers(min_value=-1, max_value=5)
    | st.sampled_from(["auto", "none", "required", "high", "text", "function", "x"])
    | st.just([{"type": "function", "function": {"name": "f"}}])
    | st.just({"type": "function", "function": {"name": "f"}})
    | st.just({"type": "json_schema", "json_schema": {"schema": {}}})
    | st.just({"enable_thinking": True})
)
text_part = st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5)})
image_part = st.fixed_dictionaries(
    {
        "type": st.just("image_url"),
        "image_url": st.fixed_dictionaries(
            {
                "url": st.sampled_from(
                    ["https://x/a.png", "data:image/png;base64,AA", "data:,", "x"]
                )
            },
            optional={"detail": st.sampled_from(["auto", "low", "huge"])},
        ),
    }
)
content = st.text(max_size=5) | st.lists(text_part | image_part | json_values, max_size=3)
tool_call = st.fixed_dictionaries(
    {
        "id": st.sampled_from(["call_1", ""]),
        "function": st.fixed_dictionaries(
            {
                "name": st.sampled_from(["f", ""]),
                "arguments": st.sampled_from(["{}", ""]) | json_values,
            }
        ),
    },
    optional={"type": st.sampled_from(["function", "custom"])},
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"])},
    optional={
        "content": content | json_values,
        "tool_calls": st.lists(tool_call, max_size=2) | json_values,
        "tool_call_id": st.just("call_1") | json_values,
        "name": st.just("f") | json_values,
        "function_call": st.just({"name": "f", "arguments": "{}"}) | json_values,
        "reasoning_content": st.text(max_size=3) | json_values,
    },
)
chat_bodies = st.fixed_dictionaries(
    {
        "model": st.just("m"),
        "messages": st.just([{"role": "user", "content": "Hi"}])
        | st.lists(message | json_values, max_size=3),
    },
    optional={key: plausible | json_values for key in CHAT_KEYS},
)


@settings(max_examples=150, deadline=None, database=None)
@given(st.one_of(json_values, chat_bodies))
def test_random_chat_bodies_only_raise_invalid_request(body: object) -> None:
    with contextlib.suppress(InvalidRequest):
        decode_chat_request(body)


@settings(max_examples=150, deadline=None, database=None)
@given(
    json_values,
    st.fixed_dictionaries(
        {"model": st.just("m")},
        optional={
            "prompt": json_values,
            "input": json_values,
            "encoding_format": json_values,
            "dimensions": json_values,
            "stop": json_values,
            "echo": json_values,
        },
    ),
)
def test_random_completion_and_embedding_bodies_only_raise_invalid_request(
    junk: object, body: dict[str, Any]
) -> None:
    for candidate in (junk, body):
        for decode in (decode_completion_request, decode_embedding_request):
            with contextlib.suppress(InvalidRequest):
                decode(candidate)
