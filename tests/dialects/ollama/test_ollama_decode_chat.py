"""Golden decodes of /api/chat bodies into canonical requests."""

from __future__ import annotations

import base64

import pytest

from mindrouter.canonical import (
    ChatRequest,
    ImagePart,
    Message,
    Reasoning,
    ResponseFormat,
    Sampling,
    TextPart,
    Tool,
    ToolCall,
    text_message,
)
from mindrouter.dialects.ollama import decode_chat_request

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
JPEG = b"\xff\xd8\xff\xe0" + b"\x01" * 40
PNG_B64 = base64.b64encode(PNG).decode()
JPEG_B64 = base64.b64encode(JPEG).decode()

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def chat(**fields: object) -> ChatRequest:
    return decode_chat_request({"model": "qwen3:8b", **fields})


def test_minimal_chat_streams_by_default() -> None:
    req = chat(messages=[{"role": "user", "content": "Hi"}])
    assert req == ChatRequest(
        model="qwen3:8b", messages=[text_message("user", "Hi")], stream=True, extra={}
    )


def test_stream_false_and_null_are_honoured() -> None:
    assert chat(messages=[], stream=False).stream is False
    assert chat(messages=[], stream=None).stream is True


def test_system_multi_turn_with_images_and_thinking() -> None:
    req = chat(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is this?", "images": [PNG_B64, JPEG_B64]},
            {"role": "assistant", "content": "A cat.", "thinking": "Looks feline."},
            {"role": "user", "content": ""},
        ],
        tools=[],
    )
    assert req.messages == [
        text_message("system", "Be brief."),
        Message(
            role="user",
            content=[
                TextPart("What is this?"),
                ImagePart(data=PNG, media_type="image/png"),
                ImagePart(data=JPEG, media_type="image/jpeg"),
            ],
        ),
        Message(role="assistant", content=[TextPart("A cat.")], reasoning="Looks feline."),
        Message(role="user", content=[]),
    ]
    assert req.modality == "multimodal"
    assert req.tools == []


def test_image_as_data_url_or_line_wrapped_base64_is_accepted() -> None:
    wrapped = "\n".join(JPEG_B64[i : i + 16] for i in range(0, len(JPEG_B64), 16))
    unpadded = PNG_B64.rstrip("=")
    data_url = f"data:image/webp;base64,{PNG_B64}"
    req = chat(messages=[{"role": "user", "images": [wrapped, unpadded, data_url]}])
    assert req.messages[0].content == [
        ImagePart(data=JPEG, media_type="image/jpeg"),
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(data=PNG, media_type="image/webp"),
    ]


def test_tools_calls_and_results_are_paired_with_minted_ids() -> None:
    req = chat(
        messages=[
            {"role": "user", "content": "Weather in Oslo and Bergen, and the time?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
                    {"function": {"index": 1, "name": "get_time", "arguments": {}}},
                    {"function": {"name": "get_weather", "arguments": {"city": "Bergen"}}},
                ],
            },
            # Results without ids: matched by tool name, earliest unanswered call first.
            {"role": "tool", "content": "4°C", "tool_name": "get_weather"},
            {"role": "tool", "content": "12:00", "tool_name": "get_time"},
            {"role": "tool", "content": "7°C", "tool_name": "get_weather"},
        ],
        tools=[WEATHER_TOOL],
    )
    assert req.tools == [
        Tool(
            name="get_weather",
            description="Weather for a city",
            parameters=WEATHER_TOOL["function"]["parameters"],  # type: ignore[index]
        )
    ]
    assert req.messages[1].tool_calls == [
        ToolCall(id="call_0", name="get_weather", arguments='{"city":"Oslo"}'),
        ToolCall(id="call_1", name="get_time", arguments="{}"),
        ToolCall(id="call_2", name="get_weather", arguments='{"city":"Bergen"}'),
    ]
    assert req.messages[1].content == []
    results = [(m.tool_call_id, m.name, m.text()) for m in req.messages[2:]]
    assert results == [
        ("call_0", "get_weather", "4°C"),
        ("call_1", "get_time", "12:00"),
        ("call_2", "get_weather", "7°C"),
    ]


def test_results_with_ids_and_without_names() -> None:
    req = chat(
        messages=[
            {
                "role": "assistant",
                "tool_calls": [
                    {"function": {"name": "a", "arguments": {"x": [1, 2]}}},
                    {"id": "call_0", "function": {"name": "b"}},
                    {"function": {"name": "a", "arguments": None}},
                ],
            },
            # By id, out of order; the name is filled in from the call.
            {"role": "tool", "content": "B", "tool_call_id": "call_0"},
            # Neither id nor name: the earliest call still unanswered.
            {"role": "tool", "content": "A"},
            {"role": "tool", "content": "A2", "tool_name": "a"},
            {"role": "tool", "content": "orphan", "tool_name": "zzz"},
        ]
    )
    # The client's own "call_0" is never minted for another call.
    assert [(c.id, c.name, c.arguments) for c in req.messages[0].tool_calls] == [
        ("call_1", "a", '{"x":[1,2]}'),
        ("call_0", "b", "{}"),
        ("call_2", "a", "{}"),
    ]
    assert [(m.tool_call_id, m.name) for m in req.messages[1:]] == [
        ("call_0", "b"),
        ("call_1", "a"),
        ("call_2", "a"),
        (None, "zzz"),
    ]


def test_ids_named_only_by_results_are_not_minted() -> None:
    req = chat(
        messages=[
            {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]},
            {"role": "tool", "content": "?", "tool_call_id": "call_0"},
        ]
    )
    assert req.messages[0].tool_calls[0].id == "call_1"
    assert (req.messages[1].tool_call_id, req.messages[1].name) == ("call_0", None)


def test_calls_across_turns_pair_with_the_earliest_unanswered() -> None:
    call = {"function": {"name": "f", "arguments": {"n": 1}}}
    req = chat(
        messages=[
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "content": "1", "tool_name": "f"},
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "content": "2", "tool_name": "f"},
        ]
    )
    assert [m.tool_call_id for m in req.messages] == [None, "call_0", None, "call_1"]
    assert req.messages[2].tool_calls[0].id == "call_1"


@pytest.mark.parametrize(
    ("think", "reasoning"),
    [
        (None, Reasoning()),
        (True, Reasoning(mode="on")),
        (False, Reasoning(mode="off")),
        ("low", Reasoning(mode="on", effort="low")),
        ("medium", Reasoning(mode="on", effort="medium")),
        ("high", Reasoning(mode="on", effort="high")),
        ("max", Reasoning(mode="on", effort="max")),
    ],
)
def test_think_variants(think: object, reasoning: Reasoning) -> None:
    assert chat(messages=[], think=think).reasoning == reasoning


SCHEMA = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        (None, None),
        ("", None),
        ("json", ResponseFormat(kind="json")),
        ({}, ResponseFormat(kind="json")),
        (SCHEMA, ResponseFormat(kind="json_schema", schema=SCHEMA)),
    ],
)
def test_format_variants(fmt: object, expected: ResponseFormat | None) -> None:
    assert chat(messages=[], format=fmt).response_format == expected


def test_options_mapping() -> None:
    req = chat(
        messages=[],
        options={
            "temperature": 0.7,
            "top_p": 0.9,
            "top_k": 40,
            "min_p": 0.05,
            "num_predict": 256,
            "stop": ["</s>", "\n\n"],
            "seed": 42,
            "repeat_penalty": 1.1,
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "num_ctx": 8192,
            "mirostat": 2,
            "num_gpu": 99,
        },
        keep_alive="10m",
        logprobs=True,
        top_logprobs=5,
        truncate=False,
        shift=True,
    )
    assert req.sampling == Sampling(
        max_tokens=256,
        temperature=0.7,
        top_p=0.9,
        top_k=40,
        min_p=0.05,
        repetition_penalty=1.1,
        frequency_penalty=-0.5,
        presence_penalty=0.5,
        stop=["</s>", "\n\n"],
        seed=42,
    )
    assert req.extra == {"num_ctx": 8192, "options": {"mirostat": 2, "num_gpu": 99}}


@pytest.mark.parametrize(("num_predict", "max_tokens"), [(-1, None), (-2, None), (0, None)])
def test_num_predict_without_a_limit(num_predict: int, max_tokens: int | None) -> None:
    assert chat(messages=[], options={"num_predict": num_predict}).sampling.max_tokens is None


def test_integral_floats_and_single_stop_string_are_accepted() -> None:
    sampling = chat(messages=[], options={"num_predict": 100.0, "stop": "END", "top_k": 0}).sampling
    assert (sampling.max_tokens, sampling.stop, sampling.top_k) == (100, ["END"], 0)


def test_keep_alive_forms_are_accepted() -> None:
    for keep_alive in ("5m", "1h30m", "0", 0, -1, 300, 1.5, "-1s", "250ms"):
        assert chat(messages=[], keep_alive=keep_alive).model == "qwen3:8b"


def test_unknown_top_level_fields_are_ignored() -> None:
    assert chat(messages=[], unknown_field={"a": 1}).messages == []
