"""vLLM and llama.cpp simulators driven by the official openai SDK and checked with its models."""

from __future__ import annotations

import base64
import json
import struct

import openai
import pytest
from openai.types import Completion, CreateEmbeddingResponse, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from .support import Sim, sse_payloads

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "detailed": {"type": "boolean"},
            },
            "required": ["city", "unit"],
        },
    },
}
HI = [{"role": "user", "content": "Hello there"}]


def prompt_count(sim: Sim, messages: list[dict[str, object]], tools: list[object] | None = None):
    """Prompt tokens as the engine's own tokenizer endpoints report them."""
    with sim.http() as http:
        if sim.config.engine == "vllm":
            body: dict[str, object] = {"model": "sim-chat", "messages": messages}
            if tools:
                body["tools"] = tools
            return http.post("/tokenize", json=body).json()["count"]
        template = {"messages": messages, "tools": tools} if tools else {"messages": messages}
        prompt = http.post("/apply-template", json=template).json()["prompt"]
        return len(http.post("/tokenize", json={"content": prompt}).json()["tokens"])


def test_chat_plain_validates_and_counts(oai: Sim) -> None:
    with oai.http() as http:
        raw = http.post("/v1/chat/completions", json={"model": "sim-chat", "messages": HI}).json()
    completion = ChatCompletion.model_validate(raw)
    assert completion.object == "chat.completion"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.role == "assistant"
    text = completion.choices[0].message.content or ""
    assert len(text.split(" ")) == oai.config.default_tokens
    assert completion.usage is not None
    assert completion.usage.completion_tokens == oai.config.default_tokens
    assert completion.usage.prompt_tokens == prompt_count(oai, HI)
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 24
    if oai.config.engine == "llamacpp":
        assert raw["timings"]["predicted_n"] == 24


def test_chat_is_deterministic_and_follows_the_conversation(oai: Sim) -> None:
    client = oai.openai()
    conversation = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is a slot?"},
        {"role": "assistant", "content": "A place for one request."},
        {"role": "user", "content": "And a queue?"},
    ]
    first = client.chat.completions.create(model="sim-chat", messages=conversation)
    again = client.chat.completions.create(model="sim-chat", messages=conversation)
    other = client.chat.completions.create(model="sim-chat", messages=HI)
    assert first.choices[0].message.content == again.choices[0].message.content
    assert first.choices[0].message.content != other.choices[0].message.content
    assert first.usage is not None
    assert first.usage.prompt_tokens == prompt_count(oai, conversation)


def test_stream_with_usage_follows_the_wire_rules(oai: Sim) -> None:
    body = {
        "model": "sim-chat",
        "messages": HI,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 5,
    }
    with oai.http() as http:
        response = http.post("/v1/chat/completions", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(response.text)
    assert payloads[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(json.loads(p)) for p in payloads[:-1]]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1
    *body_chunks, usage_chunk = chunks
    assert all(json.loads(p)["usage"] is None for p in payloads[: len(body_chunks)])
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None
    assert usage_chunk.usage.completion_tokens == 5
    content = [c.choices[0].delta.content for c in body_chunks[1:] if c.choices[0].delta.content]
    assert len(content) == 5
    assert body_chunks[-1].choices[0].finish_reason == "length"


def test_stream_without_usage_sends_no_usage_chunk(oai: Sim) -> None:
    client = oai.openai()
    chunks = list(client.chat.completions.create(model="sim-chat", messages=HI, stream=True))
    assert all(chunk.choices for chunk in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    plain = client.chat.completions.create(model="sim-chat", messages=HI)
    assert text == plain.choices[0].message.content


def test_tool_call_streams_argument_fragments(oai: Sim) -> None:
    client = oai.openai()
    stream = client.chat.completions.create(
        model="sim-chat",
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[WEATHER_TOOL],
        stream=True,
    )
    deltas = []
    finish = None
    for chunk in stream:
        ChatCompletionChunk.model_validate(chunk.model_dump())
        choice = chunk.choices[0]
        deltas += choice.delta.tool_calls or []
        finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    head, *fragments = deltas
    assert head.id and head.id.startswith("chatcmpl-tool-")
    assert head.type == "function"
    assert head.function is not None and head.function.name == "get_weather"
    assert head.function.arguments == ""
    assert len(fragments) >= 3
    assert all(d.index == 0 and d.id is None for d in fragments)
    arguments = json.loads("".join(d.function.arguments or "" for d in fragments if d.function))
    assert isinstance(arguments["city"], str)
    assert arguments["unit"] == "celsius"
    assert isinstance(arguments["days"], int)
    assert arguments["detailed"] is True


def test_tool_call_helper_and_non_stream_agree(oai: Sim) -> None:
    client = oai.openai()
    messages = [{"role": "user", "content": "Weather?"}]
    with client.chat.completions.stream(
        model="sim-chat",
        messages=messages,
        tools=[WEATHER_TOOL],
    ) as stream:
        final = stream.get_final_completion()
    with oai.http() as http:
        raw = http.post(
            "/v1/chat/completions",
            json={"model": "sim-chat", "messages": messages, "tools": [WEATHER_TOOL]},
        ).json()
    plain = ChatCompletion.model_validate(raw)
    assert plain.choices[0].finish_reason == "tool_calls"
    call = plain.choices[0].message.tool_calls[0]
    streamed = final.choices[0].message.tool_calls[0]
    assert call.function.arguments == streamed.function.arguments
    assert plain.usage is not None
    assert plain.usage.prompt_tokens == prompt_count(oai, messages, [WEATHER_TOOL])


def test_named_tool_choice_and_tool_result(oai: Sim) -> None:
    client = oai.openai()
    other = {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}}
    named = client.chat.completions.create(
        model="sim-chat",
        messages=[{"role": "user", "content": "x"}],
        tools=[WEATHER_TOOL, other],
        tool_choice={"type": "function", "function": {"name": "noop"}},
    )
    call = named.choices[0].message.tool_calls[0]
    assert call.function.name == "noop" and call.function.arguments == "{}"
    followup = client.chat.completions.create(
        model="sim-chat",
        messages=[
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "{}"},
        ],
        tools=[WEATHER_TOOL, other],
    )
    assert followup.choices[0].finish_reason == "stop"
    assert followup.choices[0].message.content
    # A user message of the client's own after the result still gets text, and a system turn
    # after the user's message still gets the call.
    commented = client.chat.completions.create(
        model="sim-chat",
        messages=[
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "{}"},
            {"role": "user", "content": "(a reminder)"},
        ],
        tools=[WEATHER_TOOL],
    )
    assert commented.choices[0].finish_reason == "stop"
    trailing_system = client.chat.completions.create(
        model="sim-chat",
        messages=[{"role": "user", "content": "x"}, {"role": "system", "content": "env"}],
        tools=[WEATHER_TOOL],
    )
    assert trailing_system.choices[0].finish_reason == "tool_calls"
    none = client.chat.completions.create(
        model="sim-chat", messages=HI, tools=[WEATHER_TOOL], tool_choice="none"
    )
    assert none.choices[0].message.tool_calls in (None, [])


def test_json_mode_and_schema(oai: Sim) -> None:
    client = oai.openai()
    plain = client.chat.completions.create(
        model="sim-chat", messages=HI, response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(plain.choices[0].message.content or ""), dict)
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name", "age", "tags"],
    }
    chunks = list(
        client.chat.completions.create(
            model="sim-chat",
            messages=HI,
            response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}},
            stream=True,
        )
    )
    pieces = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert len(pieces) >= 3
    value = json.loads("".join(pieces))
    assert isinstance(value["name"], str) and isinstance(value["age"], int)
    assert isinstance(value["tags"], list) and value["tags"]


def test_engine_specific_structured_output(oai: Sim) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    extra = (
        {"structured_outputs": {"json": schema}}
        if oai.config.engine == "vllm"
        else {"json_schema": schema}
    )
    reply = oai.openai().chat.completions.create(model="sim-chat", messages=HI, extra_body=extra)
    assert json.loads(reply.choices[0].message.content or "") == {"ok": True}


def test_reasoning_model_fills_the_engine_field(oai: Sim) -> None:
    field = "reasoning" if oai.config.engine == "vllm" else "reasoning_content"
    client = oai.openai()
    reply = client.chat.completions.create(model="sim-think", messages=HI)
    message = reply.choices[0].message
    assert (message.model_extra or {}).get(field)
    assert reply.usage is not None and reply.usage.completion_tokens == 24
    reasoning_len = len(message.model_extra[field].split(" "))
    assert len((message.content or "").split(" ")) == 24 - reasoning_len
    chunks = list(client.chat.completions.create(model="sim-think", messages=HI, stream=True))
    kinds = [
        "r" if (c.choices[0].delta.model_extra or {}).get(field) else "c" for c in chunks[1:-1]
    ]
    assert kinds == sorted(kinds, reverse=True) and kinds[0] == "r"  # reasoning first
    off = client.chat.completions.create(
        model="sim-think",
        messages=HI,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    assert not (off.choices[0].message.model_extra or {}).get(field)
    on = client.chat.completions.create(model="sim-chat", messages=HI, reasoning_effort="low")
    assert (on.choices[0].message.model_extra or {}).get(field)


def test_embeddings_base64_and_float_agree(oai: Sim) -> None:
    client = oai.openai()
    default = client.embeddings.create(model="sim-embed", input=["alpha", "beta"])
    floats = client.embeddings.create(
        model="sim-embed", input=["alpha", "beta"], encoding_format="float"
    )
    assert [d.embedding for d in default.data] == [d.embedding for d in floats.data]
    assert len(default.data[0].embedding) == oai.config.embedding_dim
    assert default.data[0].embedding != default.data[1].embedding
    assert abs(sum(v * v for v in floats.data[0].embedding) - 1) < 1e-5
    with oai.http() as http:
        body = {"model": "sim-embed", "input": "alpha"}
        raw_float = http.post("/v1/embeddings", json=body).json()
        raw_b64 = http.post("/v1/embeddings", json={**body, "encoding_format": "base64"}).json()
    parsed = CreateEmbeddingResponse.model_validate(raw_float)
    assert parsed.usage.prompt_tokens == 1
    # The SDK's model types the vector as a list; base64 is decoded by hand (little-endian f32).
    packed = base64.b64decode(raw_b64["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(packed) // 4}f", packed)) == parsed.data[0].embedding
    tokens = client.embeddings.create(model="sim-embed", input=[[1, 2, 3]], encoding_format="float")
    assert tokens.usage.prompt_tokens == 3


def test_legacy_completions(oai: Sim) -> None:
    client = oai.openai()
    done = client.completions.create(model="sim-chat", prompt="Once upon", max_tokens=7)
    Completion.model_validate(done.model_dump())
    assert done.object == "text_completion"
    assert done.choices[0].finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == 7
    chunks = list(
        client.completions.create(model="sim-chat", prompt="Once upon", max_tokens=7, stream=True)
    )
    assert "".join(c.choices[0].text for c in chunks) == done.choices[0].text
    Completion.model_validate(chunks[-1].model_dump())
    assert chunks[-1].choices[0].finish_reason == "length"
    many = client.completions.create(model="sim-chat", prompt=["a", "b"], max_tokens=3)
    assert sorted(c.index for c in many.choices) == [0, 1]


def test_models_list(oai: Sim) -> None:
    models = list(oai.openai().models.list())
    for model in models:
        Model.model_validate(model.model_dump())
    assert [m.id for m in models] == [m.name for m in oai.config.models]
    card = models[0].model_dump()
    if oai.config.engine == "vllm":
        assert card["owned_by"] == "vllm" and card["max_model_len"] == 4096 and card["root"]
    else:
        assert card["owned_by"] == "llamacpp" and card["meta"]["n_ctx_train"] == 4096


def test_stop_sequence_hit(oai: Sim) -> None:
    reply = oai.openai().chat.completions.create(
        model="sim-chat", messages=[{"role": "user", "content": "STOPTEST please"}], stop=["END"]
    )
    choice = reply.choices[0]
    assert choice.message.content == "alpha beta "
    assert choice.finish_reason == "stop"
    assert reply.usage is not None and reply.usage.completion_tokens == 3
    if oai.config.engine == "vllm":
        assert (choice.model_extra or {})["stop_reason"] == "END"
    streamed = oai.openai().chat.completions.create(
        model="sim-chat",
        messages=[{"role": "user", "content": "STOPTEST"}],
        stop="END",
        stream=True,
    )
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == "alpha beta "


def test_max_tokens_gives_length(oai: Sim) -> None:
    reply = oai.openai().chat.completions.create(model="sim-chat", messages=HI, max_tokens=3)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 3
    exact = oai.openai().chat.completions.create(
        model="sim-chat", messages=HI, max_completion_tokens=24
    )
    assert exact.choices[0].finish_reason == "stop"


def test_context_overflow_is_a_bad_request(oai: Sim) -> None:
    long = [{"role": "user", "content": "word " * 5000}]
    with pytest.raises(openai.BadRequestError) as caught:
        oai.openai().chat.completions.create(model="sim-chat", messages=long)
    error = caught.value.body
    assert isinstance(error, dict)
    if oai.config.engine == "vllm":
        assert "maximum context length" in error["message"] and error["code"] == 400
    else:
        assert error["type"] == "exceed_context_size_error"
        assert error["n_ctx"] == 4096 and error["n_prompt_tokens"] > 4096


def test_max_tokens_beyond_the_context(oai: Sim) -> None:
    client = oai.openai()
    if oai.config.engine == "vllm":
        with pytest.raises(openai.BadRequestError, match="max_tokens"):
            client.chat.completions.create(model="sim-chat", messages=HI, max_tokens=5000)
        return
    oai.config.default_tokens = 10_000
    reply = client.chat.completions.create(model="sim-chat", messages=HI, max_tokens=5000)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.total_tokens == 4096


def test_images_need_a_vision_model(oai: Sim) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}]
    with pytest.raises(openai.BadRequestError):
        oai.openai().chat.completions.create(model="sim-chat", messages=messages)
    reply = oai.openai().chat.completions.create(model="sim-vision", messages=messages)
    assert (reply.choices[0].message.content or "").startswith("(images:1)")


def test_wrong_kind_of_model_is_refused(oai: Sim) -> None:
    client = oai.openai()
    with pytest.raises(openai.APIStatusError) as chat_error:
        client.chat.completions.create(model="sim-embed", messages=HI)
    with pytest.raises(openai.APIStatusError) as embed_error:
        client.embeddings.create(model="sim-chat", input="x")
    expected = 400 if oai.config.engine == "vllm" else 501
    assert chat_error.value.status_code == embed_error.value.status_code == expected


def test_malformed_json_gets_the_engine_error_shape(oai: Sim) -> None:
    with oai.http() as http:
        bad = http.post(
            "/v1/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        missing = http.post("/v1/chat/completions", json={"model": "sim-chat"})
    for response in (bad, missing):
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == 400
        assert error["type"] == (
            "BadRequestError" if oai.config.engine == "vllm" else "invalid_request_error"
        )
