"""Golden decodes of the request options: thinking, tool choice, sampling, metadata, format."""

from __future__ import annotations

from typing import Any

import pytest

from mindrouter.canonical import ChatRequest, Reasoning, ResponseFormat, ToolChoice
from mindrouter.dialects.anthropic import decode_count_tokens_request, decode_messages_request
from mindrouter.dialects.anthropic.fields import Dropped

KEY = b"test-key"
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}


def decode(**fields: Any) -> ChatRequest:
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": 512,
        "messages": [{"role": "user", "content": "hi"}],
    }
    body.update(fields)
    return decode_messages_request(body, signing_key=KEY)


def weather_tool() -> dict[str, Any]:
    return {"name": "get_weather", "description": "Weather now", "input_schema": WEATHER_SCHEMA}


@pytest.mark.parametrize(
    ("thinking", "output_config", "expected"),
    [
        (None, None, Reasoning()),
        (None, {"effort": "high"}, Reasoning(mode="default", effort="high")),
        ({"type": "disabled"}, None, Reasoning(mode="off")),
        (
            {"type": "enabled", "budget_tokens": 1024},
            None,
            Reasoning(mode="on", effort="low", budget_tokens=1024),
        ),
        (
            {"type": "enabled", "budget_tokens": 4096},
            None,
            Reasoning(mode="on", effort="medium", budget_tokens=4096),
        ),
        (
            {"type": "enabled", "budget_tokens": 8192, "display": "summarized"},
            None,
            Reasoning(mode="on", effort="high", budget_tokens=8192),
        ),
        (
            {"type": "enabled", "budget_tokens": 2048, "display": "omitted"},
            None,
            Reasoning(mode="on", effort="medium", budget_tokens=2048, return_reasoning=False),
        ),
        ({"type": "adaptive"}, None, Reasoning(mode="default")),
        ({"type": "adaptive"}, {"effort": "xhigh"}, Reasoning(mode="default", effort="xhigh")),
        (
            {"type": "adaptive", "display": "omitted"},
            {"effort": "max"},
            Reasoning(mode="default", effort="max", return_reasoning=False),
        ),
    ],
)
def test_thinking_config(
    thinking: dict[str, Any] | None, output_config: dict[str, Any] | None, expected: Reasoning
) -> None:
    fields: dict[str, Any] = {"max_tokens": 16000}
    if thinking is not None:
        fields["thinking"] = thinking
    if output_config is not None:
        fields["output_config"] = output_config
    assert decode(**fields).reasoning == expected


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, ToolChoice(mode="auto")),
        ({"type": "any"}, ToolChoice(mode="required")),
        ({"type": "tool", "name": "get_weather"}, ToolChoice(mode="named", name="get_weather")),
        ({"type": "none"}, ToolChoice(mode="none")),
        (
            {"type": "auto", "disable_parallel_tool_use": True},
            ToolChoice(mode="auto", parallel=False),
        ),
        (
            {"type": "any", "disable_parallel_tool_use": False},
            ToolChoice(mode="required", parallel=True),
        ),
        (
            {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
            ToolChoice(mode="named", name="get_weather", parallel=False),
        ),
    ],
)
def test_tool_choice(choice: dict[str, Any], expected: ToolChoice) -> None:
    tool = {"type": "custom", **weather_tool(), "cache_control": {"type": "ephemeral"}}
    assert decode(tools=[tool], tool_choice=choice).tool_choice == expected


def test_sampling_stream_metadata_and_format() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    req = decode(
        temperature=0.2,
        top_p=0.9,
        top_k=40,
        stop_sequences=["\n\nHuman:", "END"],
        stream=True,
        metadata={"user_id": "u-42"},
        output_config={"format": {"type": "json_schema", "schema": schema}},
        service_tier="auto",
        container="c-1",
        mcp_servers=[{"anything": "goes"}],
    )
    assert (req.sampling.temperature, req.sampling.top_p, req.sampling.top_k) == (0.2, 0.9, 40)
    assert req.sampling.stop == ["\n\nHuman:", "END"]
    assert req.stream is True
    assert req.user == "u-42"
    assert req.response_format == ResponseFormat(kind="json_schema", schema=schema)
    assert req.extra == {}


def test_metadata_without_user_id() -> None:
    assert decode(metadata={}).user is None


def test_count_tokens_needs_no_max_tokens() -> None:
    request = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "thinking": {"type": "enabled", "budget_tokens": 50000},
        "tools": [weather_tool()],
    }
    req = decode_count_tokens_request(request, signing_key=KEY)
    assert req.sampling.max_tokens is None
    assert req.reasoning.budget_tokens == 50000
    assert [t.name for t in req.tools] == ["get_weather"]


def test_integral_floats_are_accepted_for_integers() -> None:
    assert decode(max_tokens=256.0).sampling.max_tokens == 256


def test_a_request_shaped_like_claude_codes() -> None:
    """The fields Claude Code sends on every turn: accepted, mapped or dropped, none refused."""
    cached = {"type": "ephemeral"}
    body = {
        "model": "m",
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2"},
            {"type": "text", "text": "You are an agent.", "cache_control": cached},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>notes</system-reminder>"},
                    {"type": "text", "text": "List the files here"},
                ],
            },
            {
                "role": "system",
                "content": [{"type": "text", "text": "# Environment", "cache_control": cached}],
            },
        ],
        "tools": [
            {**weather_tool(), "name": f"tool_{i}", "cache_control": cached} for i in range(12)
        ],
        "thinking": {"type": "adaptive", "display": "updates"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": '{"device_id":"d","session_id":"s"}'},
    }
    dropped = Dropped()
    req = decode_messages_request(body, signing_key=KEY, dropped=dropped)
    # The system turn stays where Claude Code put it, after the user's message.
    assert [m.role for m in req.messages] == ["system", "user", "system"]
    assert req.messages[2].text() == "# Environment"
    assert len(req.tools) == 12 and req.sampling.max_tokens == 32000
    assert req.reasoning == Reasoning(mode="default", effort="high")
    assert req.user == '{"device_id":"d","session_id":"s"}'
    assert dropped.paths == ["context_management"]
