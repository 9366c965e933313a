"""The OpenAI entry point in front of every backend type, checked with the official SDK and
validated with its strict models."""

from __future__ import annotations

import base64
import json
import struct

import openai
import pytest
from openai.types import Completion, CreateEmbeddingResponse, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.gateway.sse import json_chunks, post_sse
from tests.gateway.stack import ENGINES, Stack

pytestmark = pytest.mark.parametrize("engine", ENGINES)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city", "unit", "days"],
        },
    },
}


def _create(oai: openai.OpenAI, **kw: object) -> ChatCompletion:
    raw = oai.chat.completions.with_raw_response.create(**kw)  # type: ignore[call-overload]
    body = raw.http_response.json()
    strict = ChatCompletion.model_validate(body)
    assert raw.http_response.headers["x-request-id"] == strict.id
    assert strict.id.startswith("chatcmpl-")
    return strict


def test_chat_plain(oai: openai.OpenAI, engine: str) -> None:
    r = _create(oai, model=f"chat-{engine}", messages=[{"role": "user", "content": "Hello"}])
    assert r.model == f"chat-{engine}"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage is not None and r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_multi_turn_with_system(oai: openai.OpenAI, engine: str) -> None:
    one = _create(oai, model=f"chat-{engine}", messages=[{"role": "user", "content": "Hi"}])
    many = _create(
        oai,
        model=f"chat-{engine}",
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello there."},
            {"role": "user", "content": "Tell me more about rivers and stones."},
        ],
    )
    assert many.choices[0].message.content
    assert one.usage and many.usage
    # The backend saw the whole conversation, not just the last turn.
    assert many.usage.prompt_tokens > one.usage.prompt_tokens + 10


def test_stream_with_usage_chunk(stack: Stack, oai: openai.OpenAI, engine: str) -> None:
    body = {
        "model": f"chat-{engine}",
        "messages": [{"role": "user", "content": "Stream please"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = json_chunks(post_sse(stack.url + "/v1/chat/completions", body, stack.auth))
    parsed = [ChatCompletionChunk.model_validate(c) for c in chunks]
    assert len({c.id for c in parsed}) == 1
    assert parsed[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in parsed if c.choices)
    assert len(text.split()) >= 3
    finishes = [
        c.choices[0].finish_reason for c in parsed if c.choices and c.choices[0].finish_reason
    ]
    assert finishes in (["stop"], ["length"])
    assert parsed[-1].choices == [] and parsed[-1].usage is not None
    assert parsed[-1].usage.completion_tokens > 0
    assert all(c.usage is None for c in parsed[:-1])

    # And the SDK itself reads the same stream.
    sdk = oai.chat.completions.create(**body)  # type: ignore[call-overload]
    sdk_text = "".join(c.choices[0].delta.content or "" for c in sdk if c.choices)
    assert sdk_text == text


def test_stream_without_usage_has_no_usage_chunk(stack: Stack, engine: str) -> None:
    body = {
        "model": f"chat-{engine}",
        "messages": [{"role": "user", "content": "x"}],
        "stream": True,
    }
    chunks = [
        ChatCompletionChunk.model_validate(c)
        for c in json_chunks(post_sse(stack.url + "/v1/chat/completions", body, stack.auth))
    ]
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_tool_call_streamed_arguments(stack: Stack, oai: openai.OpenAI, engine: str) -> None:
    body = {
        "model": f"chat-{engine}",
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": [WEATHER_TOOL],
        "stream": True,
    }
    chunks = [
        ChatCompletionChunk.model_validate(c)
        for c in json_chunks(post_sse(stack.url + "/v1/chat/completions", body, stack.auth))
    ]
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas, "no tool-call deltas"
    first = deltas[0]
    assert first.index == 0 and first.id and first.type == "function"
    assert first.function and first.function.name == "get_weather"
    fragments = [d.function.arguments for d in deltas if d.function and d.function.arguments]
    if engine != "ollama":
        # OpenAI-style engines stream arguments in pieces; Ollama sends each call whole.
        assert len(fragments) >= 2
    args = json.loads("".join(fragments))
    assert set(args) >= {"city", "unit", "days"}
    assert args["unit"] in ("celsius", "fahrenheit") and isinstance(args["days"], int)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    # The SDK's stream helper assembles the same call.
    with oai.chat.completions.stream(
        model=f"chat-{engine}",
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    ) as s:
        final = s.get_final_completion()
    call = final.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert json.loads(call.function.arguments) == args  # type: ignore[union-attr]


def test_tool_call_round_trip(oai: openai.OpenAI, engine: str) -> None:
    first = _create(
        oai,
        model=f"chat-{engine}",
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[WEATHER_TOOL],
    )
    assert first.choices[0].finish_reason == "tool_calls"
    msg = first.choices[0].message
    assert msg.tool_calls and msg.content is None
    call = msg.tool_calls[0]
    second = _create(
        oai,
        model=f"chat-{engine}",
        tools=[WEATHER_TOOL],
        messages=[
            {"role": "user", "content": "Weather in Oslo?"},
            msg.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 4}'},
        ],
    )
    assert second.choices[0].finish_reason in ("stop", "length")
    assert second.choices[0].message.content


def test_json_mode_and_schema(oai: openai.OpenAI, engine: str) -> None:
    r = _create(
        oai,
        model=f"chat-{engine}",
        messages=[{"role": "user", "content": "Give me JSON"}],
        response_format={"type": "json_object"},
        max_tokens=200,
    )
    assert isinstance(json.loads(r.choices[0].message.content or ""), dict)
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    r = _create(
        oai,
        model=f"chat-{engine}",
        messages=[{"role": "user", "content": "A person"}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": schema},
        },
        max_tokens=200,
    )
    person = json.loads(r.choices[0].message.content or "")
    assert isinstance(person["name"], str) and isinstance(person["age"], int)


def test_reasoning_text(stack: Stack, oai: openai.OpenAI, engine: str) -> None:
    r = _create(oai, model=f"think-{engine}", messages=[{"role": "user", "content": "Think first"}])
    extra = r.choices[0].message.model_extra or {}
    assert extra.get("reasoning_content"), extra
    body = {
        "model": f"think-{engine}",
        "messages": [{"role": "user", "content": "Think"}],
        "stream": True,
    }
    chunks = json_chunks(post_sse(stack.url + "/v1/chat/completions", body, stack.auth))
    reasoning = "".join(
        c["choices"][0]["delta"].get("reasoning_content") or "" for c in chunks if c["choices"]
    )
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert reasoning.strip() and content.strip()
    # Reasoning comes before the answer.
    first_reasoning = next(
        i
        for i, c in enumerate(chunks)
        if c["choices"] and c["choices"][0]["delta"].get("reasoning_content")
    )
    first_content = next(
        i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["delta"].get("content")
    )
    assert first_reasoning < first_content


def test_reasoning_off(oai: openai.OpenAI, engine: str) -> None:
    r = _create(
        oai,
        model=f"think-{engine}",
        messages=[{"role": "user", "content": "No thinking"}],
        reasoning_effort="none",
    )
    assert not (r.choices[0].message.model_extra or {}).get("reasoning_content")


def test_stop_sequence(oai: openai.OpenAI, engine: str) -> None:
    r = _create(
        oai,
        model=f"chat-{engine}",
        messages=[{"role": "user", "content": "STOPTEST please"}],
        stop=["END"],
    )
    assert r.choices[0].finish_reason == "stop"
    assert (r.choices[0].message.content or "").strip() == "alpha beta"


def test_max_tokens_length(oai: openai.OpenAI, engine: str) -> None:
    r = _create(
        oai, model=f"chat-{engine}", messages=[{"role": "user", "content": "Long"}], max_tokens=3
    )
    assert r.choices[0].finish_reason == "length"
    assert r.usage and r.usage.completion_tokens == 3


def test_image_input(oai: openai.OpenAI, engine: str) -> None:
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()
    content = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
    ]
    r = _create(oai, model=f"vision-{engine}", messages=[{"role": "user", "content": content}])
    assert "(images:1)" in (r.choices[0].message.content or "")
    with pytest.raises(openai.BadRequestError) as exc:
        oai.chat.completions.create(
            model=f"chat-{engine}", messages=[{"role": "user", "content": content}]
        )  # type: ignore[misc]
    assert "does not accept images" in str(exc.value)


def test_embeddings_float_and_base64(oai: openai.OpenAI, engine: str) -> None:
    raw = oai.embeddings.with_raw_response.create(
        model=f"embed-{engine}", input=["hello", "world"], encoding_format="float"
    )
    strict = CreateEmbeddingResponse.model_validate(raw.http_response.json())
    assert [d.index for d in strict.data] == [0, 1]
    assert strict.usage.prompt_tokens > 0
    # The SDK asks for base64 by default and decodes it itself.
    sdk = oai.embeddings.create(model=f"embed-{engine}", input=["hello", "world"])
    for a, b in zip(strict.data, sdk.data, strict=True):
        assert b.embedding == pytest.approx(a.embedding, rel=1e-6, abs=1e-7)
    raw64 = oai.embeddings.with_raw_response.create(
        model=f"embed-{engine}", input="hello", encoding_format="base64"
    )
    encoded = raw64.http_response.json()["data"][0]["embedding"]
    floats = struct.unpack(f"<{len(base64.b64decode(encoded)) // 4}f", base64.b64decode(encoded))
    assert list(floats) == pytest.approx(strict.data[0].embedding, rel=1e-6, abs=1e-7)


def test_embedding_model_refuses_chat(oai: openai.OpenAI, engine: str) -> None:
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(
            model=f"embed-{engine}", messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(openai.BadRequestError):
        oai.embeddings.create(model=f"chat-{engine}", input="x")


def test_legacy_completions(stack: Stack, oai: openai.OpenAI, engine: str) -> None:
    raw = oai.completions.with_raw_response.create(
        model=f"chat-{engine}", prompt="Once upon a time", max_tokens=5
    )
    strict = Completion.model_validate(raw.http_response.json())
    assert strict.object == "text_completion"
    assert strict.choices[0].text and strict.choices[0].finish_reason == "length"
    assert strict.usage and strict.usage.completion_tokens == 5
    body = {
        "model": f"chat-{engine}",
        "prompt": "Once",
        "max_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = json_chunks(post_sse(stack.url + "/v1/completions", body, stack.auth))
    assert all(c["object"] == "text_completion" for c in chunks)
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert len(text.split()) == 4
    assert chunks[-1]["usage"]["completion_tokens"] == 4


def test_models_list(oai: openai.OpenAI, engine: str) -> None:
    listed = oai.models.with_raw_response.list().http_response.json()
    ids = [Model.model_validate(m).id for m in listed["data"]]
    assert f"chat-{engine}" in ids and f"embed-{engine}" in ids
    assert oai.models.retrieve(f"chat-{engine}").id == f"chat-{engine}"
