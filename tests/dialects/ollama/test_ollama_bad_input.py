"""Malformed Ollama bodies are refused with InvalidRequest naming the field, and nothing else."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindrouter.dialects.ollama import (
    chat_load_action,
    decode_chat_request,
    decode_embed_request,
    decode_embeddings_request,
    decode_generate_request,
    generate_load_action,
)
from mindrouter.errors import InvalidRequest

Decoder = Callable[[object], object]

M = {"model": "m"}
USER = {"role": "user", "content": "hi"}


def msgs(*messages: object) -> dict[str, Any]:
    return {**M, "messages": list(messages)}


def opts(**options: object) -> dict[str, Any]:
    return {**M, "messages": [USER], "options": options}


CHAT_CASES: list[tuple[object, str]] = [
    ([], ""),
    ("model=m", ""),
    (None, ""),
    ({}, "model"),
    ({"model": ""}, "model"),
    ({"model": "   "}, "model"),
    ({"model": 7}, "model"),
    ({**M, "messages": {"role": "user"}}, "messages"),
    (msgs("hello"), "messages[0]"),
    (msgs({"content": "x"}), "messages[0].role"),
    (msgs(USER, {"role": "developer", "content": "x"}), "messages[1].role"),
    (msgs({"role": "user", "content": 5}), "messages[0].content"),
    (msgs({"role": "user", "content": [{"type": "text", "text": "x"}]}), "messages[0].content"),
    (msgs({"role": "user", "images": "aGk="}), "messages[0].images"),
    (msgs({"role": "user", "images": ["not base64!"]}), "messages[0].images[0]"),
    (msgs({"role": "user", "images": ["aGk=", 3]}), "messages[0].images[1]"),
    (msgs({"role": "user", "images": [""]}), "messages[0].images[0]"),
    (msgs({"role": "user", "images": ["data:image/png,abc"]}), "messages[0].images[0]"),
    (msgs({"role": "assistant", "thinking": 1}), "messages[0].thinking"),
    (msgs({"role": "tool", "content": "x", "tool_name": 3}), "messages[0].tool_name"),
    (msgs({"role": "tool", "tool_call_id": ["x"]}), "messages[0].tool_call_id"),
    (
        msgs({"role": "user", "tool_calls": [{"function": {"name": "f"}}]}),
        "messages[0].tool_calls",
    ),
    (msgs({"role": "assistant", "tool_calls": {}}), "messages[0].tool_calls"),
    (
        msgs({"role": "assistant", "tool_calls": [{"name": "f"}]}),
        "messages[0].tool_calls[0].function",
    ),
    (
        msgs({"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}),
        "messages[0].tool_calls[0].function.name",
    ),
    (
        msgs({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}),
        "messages[0].tool_calls[0].function.arguments",
    ),
    (
        msgs({"role": "assistant", "tool_calls": [{"function": {"name": "f", "index": -1}}]}),
        "messages[0].tool_calls[0].function.index",
    ),
    (
        msgs(
            {
                "role": "assistant",
                "tool_calls": [{"function": {"name": "f", "arguments": {"n": 2**70}}}],
            }
        ),
        "messages[0].tool_calls[0].function.arguments",
    ),
    ({**M, "tools": {}}, "tools"),
    ({**M, "tools": ["get_weather"]}, "tools[0]"),
    ({**M, "tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools[0].type"),
    ({**M, "tools": [{"type": "function"}]}, "tools[0].function"),
    ({**M, "tools": [{"function": {"description": "no name"}}]}, "tools[0].function.name"),
    (
        {**M, "tools": [{"function": {"name": "f", "parameters": "{}"}}]},
        "tools[0].function.parameters",
    ),
    ({**M, "format": "xml"}, "format"),
    ({**M, "format": ["json"]}, "format"),
    ({**M, "options": "temperature=1"}, "options"),
    (opts(temperature="hot"), "options.temperature"),
    (opts(temperature=-0.1), "options.temperature"),
    (opts(temperature=True), "options.temperature"),
    (opts(top_p=1.5), "options.top_p"),
    (opts(top_k=2.5), "options.top_k"),
    (opts(min_p=-1), "options.min_p"),
    (opts(num_predict="lots"), "options.num_predict"),
    (opts(num_ctx=0), "options.num_ctx"),
    (opts(seed=2**70), "options.seed"),
    (opts(repeat_penalty=1e400), "options.repeat_penalty"),
    (opts(stop=5), "options.stop"),
    (opts(stop=["ok", 1]), "options.stop[1]"),
    (opts(stop=[""]), "options.stop[0]"),
    ({**M, "think": "extreme"}, "think"),
    ({**M, "think": 1}, "think"),
    ({**M, "stream": "yes"}, "stream"),
    ({**M, "keep_alive": "5"}, "keep_alive"),
    ({**M, "keep_alive": [5]}, "keep_alive"),
    ({**M, "logprobs": "yes"}, "logprobs"),
    ({**M, "top_logprobs": 21}, "top_logprobs"),
    ({**M, "top_logprobs": -1}, "top_logprobs"),
    ({**M, "truncate": "no"}, "truncate"),
]

GENERATE_CASES: list[tuple[object, str]] = [
    ({"prompt": "hi"}, "model"),
    ({**M, "prompt": 42}, "prompt"),
    ({**M, "prompt": "x", "raw": "true"}, "raw"),
    ({**M, "prompt": "x", "raw": True, "system": "be nice"}, "system"),
    ({**M, "prompt": "x", "raw": True, "template": "{{ .Prompt }}"}, "template"),
    ({**M, "prompt": "x", "raw": True, "context": [1, 2]}, "context"),
    ({**M, "prompt": "x", "raw": True, "images": ["aGk="]}, "images"),
    ({**M, "prompt": "x", "raw": True, "format": "json"}, "format"),
    ({**M, "prompt": "x", "suffix": "y", "system": "s"}, "system"),
    ({**M, "prompt": "x", "suffix": 3}, "suffix"),
    ({**M, "prompt": "x", "context": ["a"]}, "context[0]"),
    ({**M, "prompt": "x", "context": 5}, "context"),
    ({**M, "prompt": "x", "images": ["%%%"]}, "images[0]"),
    ({**M, "prompt": "x", "think": "off"}, "think"),
    ({**M, "prompt": "x", "template": 1}, "template"),
]

EMBED_CASES: list[tuple[object, str]] = [
    ("text", ""),
    ({"input": "x"}, "model"),
    (M, "input"),
    ({**M, "input": ""}, "input"),
    ({**M, "input": []}, "input"),
    ({**M, "input": 5}, "input"),
    ({**M, "input": ["a", 1]}, "input[1]"),
    ({**M, "input": ["a", ""]}, "input[1]"),
    ({**M, "input": "a", "truncate": 1}, "truncate"),
    ({**M, "input": "a", "dimensions": 0}, "dimensions"),
    ({**M, "input": "a", "options": []}, "options"),
]

EMBEDDINGS_CASES: list[tuple[object, str]] = [
    ({**M}, "prompt"),
    ({**M, "prompt": ""}, "prompt"),
    ({**M, "prompt": ["a"]}, "prompt"),
    ({"prompt": "a"}, "model"),
    ({**M, "prompt": "a", "keep_alive": "forever"}, "keep_alive"),
]

ALL_CASES: list[tuple[Decoder, object, str]] = [
    *[(decode_chat_request, body, param) for body, param in CHAT_CASES],
    *[(decode_generate_request, body, param) for body, param in GENERATE_CASES],
    *[(decode_embed_request, body, param) for body, param in EMBED_CASES],
    *[(decode_embeddings_request, body, param) for body, param in EMBEDDINGS_CASES],
]


def test_there_are_plenty_of_cases() -> None:
    assert len(ALL_CASES) >= 20


@pytest.mark.parametrize(("decode", "body", "param"), ALL_CASES)
def test_malformed_body_names_the_field(decode: Decoder, body: object, param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        decode(body)
    assert err.value.param == param
    assert (param or "request body") in err.value.message


# Arbitrary JSON values, including NaN and integers beyond 64 bits.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=10,
)

# Well-formed field values: bodies built from these must decode.
text = st.text(max_size=8)
image = st.sampled_from(["aGVsbG8=", "iVBORw0KGgo=", "data:image/jpeg;base64,/9j/"])
call = st.builds(
    lambda name, call_id: {
        "function": {"name": name, "arguments": {"a": [1, {"b": None}]}},
        **({"id": call_id} if call_id else {}),
    },
    st.sampled_from(["f", "g"]),
    st.sampled_from([None, "", "call_0", "x"]),
)
message = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user"])},
        optional={"content": text, "images": st.lists(image, max_size=2)},
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant")},
        optional={"content": text, "thinking": text, "tool_calls": st.lists(call, max_size=2)},
    ),
    st.fixed_dictionaries(
        {"role": st.just("tool")},
        optional={"content": text, "tool_name": st.sampled_from(["f", "g"]), "tool_call_id": text},
    ),
)
options = st.fixed_dictionaries(
    {},
    optional={
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0, 1),
        "top_k": st.integers(0, 100),
        "num_predict": st.integers(-2, 4096),
        "stop": st.lists(st.text(min_size=1, max_size=3), max_size=2),
        "num_ctx": st.integers(1, 2**20),
        "mirostat": json_values,
    },
)
VALID: dict[str, st.SearchStrategy[Any]] = {
    "messages": st.lists(message, max_size=5),
    "tools": st.just([]) | st.just([{"type": "function", "function": {"name": "f"}}]),
    "format": st.sampled_from(["", "json", {"type": "object"}]),
    "options": options,
    "stream": st.booleans(),
    "keep_alive": st.sampled_from(["5m", "1h30m", 0, -1, 2.5, "0"]),
    "think": st.sampled_from([True, False, "low", "medium", "high", "max"]),
    "logprobs": st.booleans(),
    "top_logprobs": st.integers(0, 20),
    "truncate": st.booleans(),
    "shift": st.booleans(),
}
valid_chat = st.fixed_dictionaries({"model": st.just("qwen3:8b")}, optional=VALID)
# One field of a valid body, or of one of its messages, replaced by an arbitrary JSON value.
mutated = st.tuples(
    valid_chat, st.sampled_from(["model", *VALID, "prompt", "raw", "input"]), json_values
).map(lambda t: {**t[0], t[1]: t[2]})
MESSAGE_KEYS = ["role", "content", "images", "thinking", "tool_calls", "tool_name", "tool_call_id"]


def _mutate_message(
    body: dict[str, Any], messages: list[dict[str, Any]], at: int, key: str, value: object
) -> dict[str, Any]:
    messages[at % len(messages)][key] = value
    return {**body, "messages": messages}


mutated_message = st.builds(
    _mutate_message,
    valid_chat,
    st.lists(message, min_size=1, max_size=3),
    st.integers(0, 2),
    st.sampled_from(MESSAGE_KEYS),
    json_values,
)

DECODERS: list[Decoder] = [
    decode_chat_request,
    decode_generate_request,
    decode_embed_request,
    decode_embeddings_request,
    chat_load_action,
    generate_load_action,
]


@settings(max_examples=60, deadline=None)
@given(body=valid_chat)
def test_well_formed_chat_bodies_decode(body: dict[str, Any]) -> None:
    req = decode_chat_request(body)
    assert len(req.messages) == len(body.get("messages", []))
    assert (chat_load_action(body) is None) == bool(req.messages)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=json_values | mutated | mutated_message)
def test_arbitrary_bodies_raise_only_invalid_request(body: object) -> None:
    for decode in DECODERS:
        try:
            decode(body)
        except InvalidRequest as err:
            assert err.param is not None
            assert err.message
