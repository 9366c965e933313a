"""Chat requests on the OpenAI wire decode into the canonical request, feature by feature."""

from __future__ import annotations

from typing import Any

import pytest

from mindrouter.canonical import (
    ImagePart,
    Message,
    Reasoning,
    ResponseFormat,
    Sampling,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
)
from mindrouter.dialects.openai import decode_chat_request, wants_usage

PNG = "data:image/png;base64,iVBORw0KGgo="
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": True,
    },
}


def chat(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "qwen3-8b", "messages": [{"role": "user", "content": "Hi"}]}
    body.update(fields)
    return body


def test_minimal_request_has_backend_defaults() -> None:
    req = decode_chat_request(chat())
    assert req.model == "qwen3-8b"
    assert req.messages == [Message(role="user", content=[TextPart("Hi")])]
    assert req.sampling == Sampling()
    assert req.reasoning == Reasoning()
    assert req.response_format is None
    assert req.tools == [] and req.tool_choice is None
    assert req.stream is False and req.extra == {} and req.user is None


def test_system_developer_and_multi_turn() -> None:
    req = decode_chat_request(
        chat(
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": [{"type": "text", "text": "No emoji."}]},
                {"role": "user", "content": "Hi", "name": "ann"},
                {"role": "assistant", "content": "Hello!"},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                },
            ]
        )
    )
    assert [m.role for m in req.messages] == ["system", "system", "user", "assistant", "user"]
    assert req.messages[1].content == [TextPart("No emoji.")]
    assert req.messages[3].text() == "Hello!"
    assert req.messages[4].content == [TextPart("a"), TextPart("b")]


def test_images_keep_their_url_and_detail() -> None:
    req = decode_chat_request(
        chat(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}},
                        {"type": "image_url", "image_url": {"url": "https://example.org/cat.jpg"}},
                    ],
                }
            ]
        )
    )
    parts = req.messages[0].content
    assert parts[1] == ImagePart(url=PNG, media_type="image/png", detail="low")
    assert parts[2] == ImagePart(url="https://example.org/cat.jpg")
    assert req.modality == "multimodal"


def test_tool_loop_round_trip() -> None:
    req = decode_chat_request(
        chat(
            messages=[
                {"role": "user", "content": "Weather in Oslo?"},
                {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "Need the tool.",
                    "tool_calls": [
                        {
                            "id": "call_7Qd2",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_7Qd2", "content": '{"temp_c":4}'},
            ],
            tools=[WEATHER],
            tool_choice="auto",
            parallel_tool_calls=False,
        )
    )
    assistant, result = req.messages[1], req.messages[2]
    assert assistant.content == []
    assert assistant.reasoning == "Need the tool."
    assert assistant.tool_calls == [ToolCall("call_7Qd2", "get_weather", '{"city":"Oslo"}')]
    assert result.role == "tool" and result.tool_call_id == "call_7Qd2"
    assert result.text() == '{"temp_c":4}'
    assert req.tools == [
        Tool(
            name="get_weather",
            description="Current weather",
            parameters={"type": "object", "properties": {"city": {"type": "string"}}},
            strict=True,
        )
    ]
    assert req.tool_choice == ToolChoice(mode="auto", parallel=False)


def test_assistant_refusals_are_its_text() -> None:
    req = decode_chat_request(
        chat(
            messages=[
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": None, "refusal": "I can't."},
                {"role": "user", "content": "y"},
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
            ]
        )
    )
    assert req.messages[1].content == [TextPart("I can't.")]
    assert req.messages[3].content == [TextPart("No.")]


def test_assistant_reasoning_field_alias() -> None:
    req = decode_chat_request(
        chat(
            messages=[
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "y", "reasoning": "r"},
            ]
        )
    )
    assert req.messages[1].reasoning == "r"


@pytest.mark.parametrize(
    ("wire", "choice"),
    [
        ("none", ToolChoice(mode="none")),
        ("auto", ToolChoice(mode="auto")),
        ("required", ToolChoice(mode="required")),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            ToolChoice(mode="named", name="get_weather"),
        ),
    ],
)
def test_tool_choice_variants(wire: object, choice: ToolChoice) -> None:
    assert decode_chat_request(chat(tools=[WEATHER], tool_choice=wire)).tool_choice == choice


def test_tool_without_parameters_takes_no_arguments() -> None:
    req = decode_chat_request(chat(tools=[{"type": "function", "function": {"name": "now"}}]))
    assert req.tools == [Tool(name="now", parameters={"type": "object", "properties": {}})]


def test_parallel_tool_calls_alone_implies_auto() -> None:
    req = decode_chat_request(chat(tools=[WEATHER], parallel_tool_calls=True))
    assert req.tool_choice == ToolChoice(mode="auto", parallel=True)


def test_legacy_functions_become_tools_and_calls_get_paired_ids() -> None:
    req = decode_chat_request(
        chat(
            messages=[
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {"name": "get_weather", "arguments": "{}"},
                },
                {"role": "function", "name": "get_weather", "content": "sunny"},
            ],
            functions=[WEATHER["function"]],
            function_call={"name": "get_weather"},
        )
    )
    call = req.messages[1].tool_calls[0]
    assert (call.name, call.arguments) == ("get_weather", "{}")
    result = req.messages[2]
    assert result.role == "tool" and result.name == "get_weather"
    assert result.tool_call_id == call.id
    assert [t.name for t in req.tools] == ["get_weather"]
    assert req.tool_choice == ToolChoice(mode="named", name="get_weather")
    assert decode_chat_request(
        chat(functions=[WEATHER["function"]], function_call="none")
    ).tool_choice == ToolChoice(mode="none")


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ({"type": "text"}, ResponseFormat(kind="text")),
        ({"type": "json_object"}, ResponseFormat(kind="json")),
        (
            {
                "type": "json_schema",
                "json_schema": {"name": "pt", "schema": {"type": "object"}, "strict": True},
            },
            ResponseFormat(kind="json_schema", schema={"type": "object"}, name="pt", strict=True),
        ),
        # llama.cpp's shorthand with the schema at the top level.
        (
            {"type": "json_object", "schema": {"type": "array"}},
            ResponseFormat(kind="json_schema", schema={"type": "array"}),
        ),
        (None, None),
    ],
)
def test_response_format_variants(wire: object, expected: ResponseFormat | None) -> None:
    assert decode_chat_request(chat(response_format=wire)).response_format == expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, Reasoning()),
        ({"reasoning_effort": "none"}, Reasoning(mode="off", effort="none")),
        ({"reasoning_effort": "minimal"}, Reasoning(mode="on", effort="minimal")),
        ({"reasoning_effort": "high"}, Reasoning(mode="on", effort="high")),
        ({"reasoning_effort": "max"}, Reasoning(mode="on", effort="max")),
        ({"chat_template_kwargs": {"enable_thinking": True}}, Reasoning(mode="on")),
        ({"chat_template_kwargs": {"enable_thinking": False}}, Reasoning(mode="off")),
        (
            {"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": False}},
            Reasoning(mode="off", effort="high"),
        ),
        (
            {"reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": True}},
            Reasoning(mode="on"),
        ),
        ({"include_reasoning": False}, Reasoning(return_reasoning=False)),
    ],
)
def test_reasoning_variants(fields: dict[str, Any], expected: Reasoning) -> None:
    assert decode_chat_request(chat(**fields)).reasoning == expected


def test_enable_thinking_stays_in_extra_for_the_engine() -> None:
    kwargs = {"enable_thinking": False, "custom": 1}
    assert decode_chat_request(chat(chat_template_kwargs=kwargs)).extra == {
        "chat_template_kwargs": kwargs
    }


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("END", ["END"]),
        (["a", "b"], ["a", "b"]),
        ([], []),
        (None, []),
        ("", []),
        (["a", ""], ["a"]),
    ],
)
def test_stop_is_a_list(stop: object, expected: list[str]) -> None:
    assert decode_chat_request(chat(stop=stop)).sampling.stop == expected


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    assert decode_chat_request(chat(max_tokens=10)).sampling.max_tokens == 10
    assert decode_chat_request(chat(max_completion_tokens=20)).sampling.max_tokens == 20
    both = chat(max_tokens=10, max_completion_tokens=20)
    assert decode_chat_request(both).sampling.max_tokens == 20


def test_sampling_and_engine_extras() -> None:
    req = decode_chat_request(
        chat(
            temperature=0.7,
            top_p=1,
            n=2,
            seed=42,
            presence_penalty=-1.5,
            frequency_penalty=2,
            top_k=40,
            min_p=0.05,
            repetition_penalty=1.1,
            min_tokens=5,
            mirostat=2,
            ignore_eos=True,
            logit_bias={"42": -100},
            chat_template_kwargs={"x": 1},
            # Known OpenAI fields with no gateway meaning are accepted and dropped.
            metadata={"k": "v"},
            store=False,
            service_tier="auto",
            logprobs=True,
            top_logprobs=3,
            user="alice",
        )
    )
    assert req.sampling == Sampling(
        temperature=0.7,
        top_p=1.0,
        n=2,
        seed=42,
        presence_penalty=-1.5,
        frequency_penalty=2.0,
        top_k=40,
        min_p=0.05,
        repetition_penalty=1.1,
    )
    assert req.extra == {
        "min_tokens": 5,
        "mirostat": 2,
        "ignore_eos": True,
        "logit_bias": {"42": -100},
        "chat_template_kwargs": {"x": 1},
    }
    assert req.user == "alice"


def test_nulls_mean_absent() -> None:
    req = decode_chat_request(
        chat(temperature=None, max_tokens=None, stop=None, tools=None, response_format=None, n=None)
    )
    assert req.sampling == Sampling()


def test_stream_and_usage_flag() -> None:
    body = chat(stream=True, stream_options={"include_usage": True})
    assert decode_chat_request(body).stream is True
    assert wants_usage(body) is True
    assert wants_usage(chat(stream=True)) is False
    assert wants_usage(chat(stream=True, stream_options={"include_usage": False})) is False
    assert wants_usage(chat()) is False
    assert wants_usage([1]) is False
