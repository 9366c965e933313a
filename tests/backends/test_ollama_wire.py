"""Canonical ⇄ Ollama native API: request bodies and NDJSON decoding."""

from __future__ import annotations

from typing import Any

import pytest

from mindrouter.backends.ollama_results import OllamaDecoder, decode_embed
from mindrouter.backends.ollama_wire import (
    encode_chat,
    encode_embed,
    encode_generate,
    encode_think,
)
from mindrouter.canonical import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    Finish,
    ImagePart,
    Message,
    Reasoning,
    ReasoningDelta,
    ResponseFormat,
    Sampling,
    TextDelta,
    TextPart,
    Tool,
    ToolCall,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    Usage,
    text_message,
)
from mindrouter.errors import InvalidRequest, UpstreamUnavailable

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
OSLO = {"city": "Oslo"}
RAW = {"_raw": "{not json"}


def test_full_chat_body() -> None:
    req = ChatRequest(
        model="qwen3:8b",
        messages=[
            text_message("system", "Be brief."),
            Message(
                "user",
                [
                    TextPart("Look:"),
                    ImagePart(url="data:image/png;base64,iVBORw0KGgo="),
                    ImagePart(data=b"\xff\xd8\xffjpeg"),
                ],
            ),
            Message(
                "assistant",
                [],
                reasoning="Need weather.",
                tool_calls=[
                    ToolCall("call_1", "get_weather", '{"city":"Oslo"}'),
                    ToolCall("call_2", "broken", "{not json"),
                ],
            ),
            Message("tool", [TextPart("4C")], tool_call_id="call_1"),
            Message("tool", [TextPart("?")], tool_call_id="call_2", name="explicit"),
        ],
        sampling=Sampling(
            max_tokens=100,
            temperature=0.2,
            top_p=0.8,
            top_k=30,
            min_p=0.1,
            repetition_penalty=1.2,
            frequency_penalty=0.3,
            presence_penalty=0.4,
            stop=["\n\n"],
            seed=1,
        ),
        tools=[Tool("get_weather", "Weather", SCHEMA)],
        response_format=ResponseFormat("json_schema", SCHEMA, "w"),
        reasoning=Reasoning("on", "xhigh"),
        extra={"min_tokens": 3},
    )
    assert encode_chat(req, stream=True, num_ctx=8192) == {
        "model": "qwen3:8b",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Look:", "images": ["iVBORw0KGgo=", "/9j/anBlZw=="]},
            {
                "role": "assistant",
                "content": "",
                "thinking": "Need weather.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
                    },
                    {
                        "id": "call_2",
                        "function": {"name": "broken", "arguments": {"_raw": "{not json"}},
                    },
                ],
            },
            {"role": "tool", "content": "4C", "tool_name": "get_weather", "tool_call_id": "call_1"},
            {"role": "tool", "content": "?", "tool_name": "explicit", "tool_call_id": "call_2"},
        ],
        "stream": True,
        "tools": [
            {
                "type": "function",
                "function": {"name": "get_weather", "parameters": SCHEMA, "description": "Weather"},
            }
        ],
        "format": SCHEMA,
        "options": {
            "temperature": 0.2,
            "top_p": 0.8,
            "top_k": 30,
            "min_p": 0.1,
            "repeat_penalty": 1.2,
            "frequency_penalty": 0.3,
            "presence_penalty": 0.4,
            "seed": 1,
            "stop": ["\n\n"],
            "num_predict": 100,
            "num_ctx": 8192,
        },
        "think": "max",
    }


def test_minimal_chat_body() -> None:
    req = ChatRequest("m", [text_message("user", "Hi")])
    assert encode_chat(req, stream=False) == {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": False,
    }


@pytest.mark.parametrize(
    ("reasoning", "think"),
    [
        (Reasoning(), None),
        (Reasoning("off"), False),
        (Reasoning("off", "none"), False),
        (Reasoning("on"), True),
        (Reasoning("on", "minimal"), "low"),
        (Reasoning("on", "low"), "low"),
        (Reasoning("on", "medium"), "medium"),
        (Reasoning("on", "high"), "high"),
        (Reasoning("on", "max"), "max"),
        (Reasoning("on", "xhigh"), "max"),
    ],
)
def test_think_mapping(reasoning: Reasoning, think: Any) -> None:
    assert encode_think(reasoning) == think


def test_system_turns_stay_where_the_client_put_them() -> None:
    # Ollama's templates render a system message wherever it stands.
    req = ChatRequest(
        "m",
        [text_message("user", "Hi"), text_message("system", "Env"), text_message("user", "Go")],
    )
    roles = [m["role"] for m in encode_chat(req, stream=False)["messages"]]
    assert roles == ["user", "system", "user"]


def test_tool_choice_none_drops_tools_and_named_keeps_one() -> None:
    tools = [Tool("a"), Tool("b")]
    none = ChatRequest(
        "m", [text_message("user", "x")], tools=tools, tool_choice=ToolChoice("none")
    )
    assert "tools" not in encode_chat(none, stream=False)
    named = ChatRequest(
        "m", [text_message("user", "x")], tools=tools, tool_choice=ToolChoice("named", "b")
    )
    assert [t["function"]["name"] for t in encode_chat(named, stream=False)["tools"]] == ["b"]


def test_json_mode() -> None:
    req = ChatRequest("m", [text_message("user", "x")], response_format=ResponseFormat("json"))
    assert encode_chat(req, stream=False)["format"] == "json"


def test_remote_image_urls_are_refused() -> None:
    msg = Message("user", [ImagePart(url="https://example.com/cat.png")])
    with pytest.raises(InvalidRequest, match="Remote image URLs are not supported"):
        encode_chat(ChatRequest("m", [msg]), stream=False)


def test_generate_and_embed_bodies() -> None:
    req = CompletionRequest("m", ["a"], Sampling(max_tokens=3))
    assert encode_generate(req, "a", stream=True) == {
        "model": "m",
        "prompt": "a",
        "stream": True,
        "raw": True,
        "options": {"num_predict": 3},
    }
    fim = CompletionRequest("m", ["def f("], suffix="return x")
    assert encode_generate(fim, "def f(", stream=False, num_ctx=4096) == {
        "model": "m",
        "prompt": "def f(",
        "stream": False,
        "suffix": "return x",
        "options": {"num_ctx": 4096},
    }
    assert encode_embed(EmbeddingRequest("e", ["x"], dimensions=8, truncate=False)) == {
        "model": "e",
        "input": ["x"],
        "truncate": False,
        "dimensions": 8,
    }
    with pytest.raises(InvalidRequest):
        encode_embed(EmbeddingRequest("e", [[1, 2]]))


def test_stream_lines_decode() -> None:
    d = OllamaDecoder("b")
    lines = [
        {"message": {"role": "assistant", "content": "", "thinking": "hmm"}, "done": False},
        {"message": {"role": "assistant", "content": "Hi"}, "done": False},
        {
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"index": 0, "name": "f", "arguments": {"a": 1}}}],
            },
            "done": False,
        },
        {
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 12,
            "eval_count": 7,
        },
    ]
    assert [d.feed(line) for line in lines] == [False, False, False, True]
    start = d.out[2]
    assert isinstance(start, ToolCallStart)
    assert start.id.startswith("call_")
    assert d.out == [
        ReasoningDelta("hmm"),
        TextDelta("Hi"),
        ToolCallStart(0, start.id, "f"),
        ToolCallArgs(0, '{"a":1}'),
        ToolCallEnd(0),
        Finish("tool_calls"),
    ]
    assert d.usage(lambda: 0) == Usage(12, 7)


def test_length_and_missing_counts() -> None:
    d = OllamaDecoder("b", choice=2, generate=True)
    d.feed({"response": "abc", "done": False})
    d.feed({"response": "", "done": True, "done_reason": "length"})
    assert d.out == [TextDelta("abc", 2), Finish("length", None, 2)]
    usage = d.usage(lambda: 9)
    assert (usage.input_tokens, usage.estimated) == (9, True)
    assert usage.output_tokens > 0


@pytest.mark.parametrize("count", [4.5, -1, True, "4"])
def test_counts_that_are_not_whole_numbers_are_estimated(count: object) -> None:
    d = OllamaDecoder("b")
    d.feed({"message": {"content": "abc"}, "done": False})
    d.feed({"done": True, "prompt_eval_count": count, "eval_count": count})
    usage = d.usage(lambda: 9)
    assert (usage.input_tokens, usage.output_tokens, usage.estimated) == (9, 1, True)
    whole = OllamaDecoder("b")
    whole.feed({"done": True, "prompt_eval_count": 12.0, "eval_count": 7.0})
    assert (u := whole.usage(lambda: 0)) == Usage(12, 7) and type(u.input_tokens) is int


@pytest.mark.parametrize(
    ("line", "generate"),
    [
        ({"message": "x"}, False),
        ({"message": {"content": 5}}, False),
        ({"message": {"thinking": ["x"]}}, False),
        ({"message": {"tool_calls": "x"}}, False),
        ({"message": {"tool_calls": [{"function": {"name": 3}}]}}, False),
        ({"response": 5}, True),
    ],
)
def test_a_line_of_an_unexpected_shape_is_the_engine_failing(line: Any, generate: bool) -> None:
    with pytest.raises(UpstreamUnavailable, match="unexpected shape"):
        OllamaDecoder("b", generate=generate).feed(line)


def test_error_line_raises() -> None:
    with pytest.raises(UpstreamUnavailable, match="out of memory"):
        OllamaDecoder("b").feed({"error": "out of memory"})


def test_embed_result() -> None:
    result = decode_embed({"embeddings": [[0.1], [0.2]], "prompt_eval_count": 4}, "e", lambda: 0)
    assert (result.vectors, result.usage) == ([[0.1], [0.2]], Usage(4))
