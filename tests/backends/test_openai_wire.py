"""Canonical requests encode into the exact JSON each OpenAI-wire engine expects."""

from __future__ import annotations

from typing import Any

from mindrouter.backends.llamacpp import encode_apply_template
from mindrouter.backends.openai_wire import (
    GENERIC,
    LLAMACPP,
    VLLM,
    encode_chat,
    encode_completion,
    encode_embedding,
)
from mindrouter.backends.vllm import encode_tokenize
from mindrouter.canonical import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    ImagePart,
    Message,
    Reasoning,
    ResponseFormat,
    Sampling,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
    text_message,
)

PNG = b"\x89PNG\r\n\x1a\n0000"
PNG_URL = "data:image/png;base64,iVBORw0KGgowMDAw"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
WEATHER = Tool(name="get_weather", description="Current weather", parameters=SCHEMA, strict=True)


def conversation() -> list[Message]:
    return [
        text_message("system", "Be brief."),
        Message("user", [TextPart("What is here?"), ImagePart(data=PNG, detail="low")]),
        Message(
            "assistant",
            [],
            reasoning="Look it up.",
            tool_calls=[ToolCall("call_1", "get_weather", '{"city":"Oslo"}')],
        ),
        Message("tool", [TextPart('{"temp_c":4}')], tool_call_id="call_1", name="get_weather"),
    ]


def full_request(**kw: Any) -> ChatRequest:
    return ChatRequest(
        model="qwen3-8b",
        messages=conversation(),
        sampling=Sampling(
            max_tokens=200,
            temperature=0.5,
            top_p=0.9,
            top_k=20,
            min_p=0.05,
            repetition_penalty=1.1,
            frequency_penalty=0.1,
            presence_penalty=0.2,
            stop=["END"],
            seed=7,
            n=2,
        ),
        tools=[WEATHER],
        tool_choice=ToolChoice("named", "get_weather", parallel=False),
        response_format=ResponseFormat("json_schema", SCHEMA, "weather", True),
        reasoning=Reasoning("on", "high", 1024, return_reasoning=False),
        extra={"min_tokens": 3, "model": "ignored", "chat_template_kwargs": {"custom": 1}},
        **kw,
    )


MESSAGES_VLLM = [
    {"role": "system", "content": "Be brief."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is here?"},
            {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "low"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
            }
        ],
        "reasoning": "Look it up.",
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c":4}'},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather",
            "parameters": SCHEMA,
            "strict": True,
        },
    }
]


def test_vllm_chat_body_streaming() -> None:
    assert encode_chat(full_request(), VLLM, stream=True) == {
        "model": "qwen3-8b",
        "messages": MESSAGES_VLLM,
        "max_tokens": 200,
        "temperature": 0.5,
        "top_p": 0.9,
        "frequency_penalty": 0.1,
        "presence_penalty": 0.2,
        "seed": 7,
        "stop": ["END"],
        "n": 2,
        "top_k": 20,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True},
        },
        "reasoning_effort": "high",
        "chat_template_kwargs": {"custom": 1, "enable_thinking": True},
        "thinking_token_budget": 1024,
        "include_reasoning": False,
        "min_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_minimal_chat_is_minimal_for_every_flavor() -> None:
    req = ChatRequest(model="m", messages=[text_message("user", "Hi")])
    for flavor in (VLLM, LLAMACPP, GENERIC):
        assert encode_chat(req, flavor, stream=False) == {
            "model": "m",
            "messages": [{"role": "user", "content": "Hi"}],
            "stream": False,
        }


def test_text_only_parts_become_one_string() -> None:
    req = ChatRequest("m", [Message("user", [TextPart("a"), TextPart("b")])])
    assert encode_chat(req, VLLM, stream=False)["messages"] == [{"role": "user", "content": "ab"}]


def test_reasoning_off_and_default_for_vllm() -> None:
    off = ChatRequest("m", [text_message("user", "x")], reasoning=Reasoning("off", "none"))
    body = encode_chat(off, VLLM, stream=False)
    assert body["reasoning_effort"] == "none"
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    on = ChatRequest("m", [text_message("user", "x")], reasoning=Reasoning("on"))
    body = encode_chat(on, VLLM, stream=False)
    assert "reasoning_effort" not in body
    assert body["chat_template_kwargs"] == {"enable_thinking": True}


def test_json_mode_and_tool_choice_strings() -> None:
    req = ChatRequest(
        "m",
        [text_message("user", "x")],
        tools=[Tool("f")],
        tool_choice=ToolChoice("required"),
        response_format=ResponseFormat("json"),
    )
    body = encode_chat(req, VLLM, stream=False)
    assert body["response_format"] == {"type": "json_object"}
    assert body["tool_choice"] == "required"
    assert body["tools"] == [
        {"type": "function", "function": {"name": "f", "parameters": Tool("f").parameters}}
    ]
    # A tool choice without tools is meaningless, and some engines reject it.
    bare = ChatRequest("m", [text_message("user", "x")], tool_choice=ToolChoice("none"))
    assert "tool_choice" not in encode_chat(bare, VLLM, stream=False)


def test_llamacpp_chat_body() -> None:
    body = encode_chat(full_request(), LLAMACPP, stream=False)
    assert body["messages"][2]["reasoning_content"] == "Look it up."
    assert "reasoning" not in body["messages"][2]
    assert body["repeat_penalty"] == 1.1
    assert "repetition_penalty" not in body
    assert body["reasoning_format"] == "deepseek"
    assert body["reasoning_effort"] == "high"
    assert body["chat_template_kwargs"] == {"custom": 1, "enable_thinking": True}
    assert "thinking_token_budget" not in body
    assert "include_reasoning" not in body
    assert body["min_tokens"] == 3
    assert body["response_format"]["type"] == "json_schema"
    # No reasoning_format unless thinking was asked for.
    off = ChatRequest("m", [text_message("user", "x")], reasoning=Reasoning("off"))
    assert "reasoning_format" not in encode_chat(off, LLAMACPP, stream=False)


def test_generic_openai_gets_standard_fields_only() -> None:
    body = encode_chat(full_request(), GENERIC, stream=True)
    assert set(body) == {
        "model",
        "messages",
        "max_tokens",
        "temperature",
        "top_p",
        "frequency_penalty",
        "presence_penalty",
        "seed",
        "stop",
        "n",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "reasoning_effort",
        "stream",
        "stream_options",
    }
    assert "reasoning" not in body["messages"][2]
    assert "reasoning_content" not in body["messages"][2]


def test_remote_image_url_passes_through() -> None:
    msg = Message("user", [ImagePart(url="https://example.com/cat.png")])
    body = encode_chat(ChatRequest("m", [msg]), VLLM, stream=False)
    assert body["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    ]


def test_completion_bodies() -> None:
    one = CompletionRequest("m", ["Once"], Sampling(max_tokens=5), suffix="end", echo=True)
    assert encode_completion(one, VLLM, stream=True) == {
        "model": "m",
        "prompt": "Once",
        "suffix": "end",
        "echo": True,
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    two = CompletionRequest("m", ["a", "b"], extra={"best_of": 2})
    assert encode_completion(two, VLLM, stream=False) == {
        "model": "m",
        "prompt": ["a", "b"],
        "best_of": 2,
        "stream": False,
    }
    assert "best_of" not in encode_completion(two, GENERIC, stream=False)


def test_embedding_body_asks_for_floats() -> None:
    assert encode_embedding(EmbeddingRequest("e", ["a", "b"], dimensions=64)) == {
        "model": "e",
        "input": ["a", "b"],
        "encoding_format": "float",
        "dimensions": 64,
    }
    assert encode_embedding(EmbeddingRequest("e", [[1, 2, 3]]))["input"] == [[1, 2, 3]]


def test_token_counting_bodies() -> None:
    req = full_request()
    assert encode_tokenize(req) == {
        "model": "qwen3-8b",
        "messages": MESSAGES_VLLM,
        "add_generation_prompt": True,
        "tools": TOOLS,
        "chat_template_kwargs": {"custom": 1, "enable_thinking": True},
    }
    plain = ChatRequest("m", [text_message("user", "Hi")])
    assert encode_apply_template(plain) == {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}],
    }


def _system_turns() -> list[Message]:
    """As Anthropic clients send it: a system prompt, then a system turn after the user's."""
    return [
        text_message("system", "You are an agent."),
        text_message("user", "List the files"),
        text_message("system", "# Environment\ncwd: /work"),
        Message("assistant", [], tool_calls=[ToolCall("call_1", "ls", "{}")]),
        Message("tool", [TextPart("a.txt")], tool_call_id="call_1"),
        text_message("system", "Be brief."),
    ]


def test_vllm_and_llamacpp_fold_system_turns_into_the_leading_one() -> None:
    for flavor in (VLLM, LLAMACPP):
        req = ChatRequest("m", _system_turns())
        messages = encode_chat(req, flavor, stream=False)["messages"]
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
        folded = "You are an agent.\n\n# Environment\ncwd: /work\n\nBe brief."
        assert messages[0]["content"] == folded
    # The token count sees what the call sends.
    tokenized = encode_tokenize(ChatRequest("m", _system_turns()))["messages"]
    assert [m["role"] for m in tokenized] == ["system", "user", "assistant", "tool"]
    applied = encode_apply_template(ChatRequest("m", _system_turns()))["messages"]
    assert [m["role"] for m in applied] == ["system", "user", "assistant", "tool"]
    # Without a leading one, the first system turn's text leads.
    late = ChatRequest("m", [text_message("user", "Hi"), text_message("system", "Env")])
    assert encode_chat(late, VLLM, stream=False)["messages"] == [
        {"role": "system", "content": "Env"},
        {"role": "user", "content": "Hi"},
    ]


def test_system_turns_stay_in_place_for_a_generic_server() -> None:
    messages = encode_chat(ChatRequest("m", _system_turns()), GENERIC, stream=False)["messages"]
    roles = ["system", "user", "system", "assistant", "tool", "system"]
    assert [m["role"] for m in messages] == roles


def test_a_single_leading_system_message_is_left_alone() -> None:
    req = ChatRequest("m", [text_message("system", "S"), text_message("user", "Hi")])
    assert encode_chat(req, VLLM, stream=False)["messages"] == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Hi"},
    ]
