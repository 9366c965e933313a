"""JSON bodies pass the openai SDK's strict models and carry what the canonical result says."""

from __future__ import annotations

import base64
import struct
from typing import get_args

import pytest
from openai.types import Completion, CreateEmbeddingResponse, Model
from openai.types.chat import ChatCompletion

from mindrouter.canonical import ChatResult, Choice, EmbeddingResult, FinishReason, ToolCall, Usage
from mindrouter.dialects.openai import (
    ReasoningField,
    encode_chat_response,
    encode_completion_response,
    encode_embedding_response,
    encode_model,
    encode_model_list,
)

USAGE = Usage(input_tokens=57, output_tokens=18, cached_input_tokens=40, reasoning_tokens=5)
CALL = ToolCall(id="call_7Qd2", name="get_weather", arguments='{"city":"Oslo"}')


def result(*choices: Choice) -> ChatResult:
    return ChatResult(model="backend-name", choices=list(choices), usage=USAGE)


def chat_body(res: ChatResult) -> ChatCompletion:
    body = encode_chat_response(res, request_id="chatcmpl-9f2c", created=1767225600, model="m")
    return ChatCompletion.model_validate(body, strict=True)


def test_text_reply() -> None:
    cc = chat_body(result(Choice(text="Hello.")))
    assert (cc.id, cc.object, cc.created, cc.model) == (
        "chatcmpl-9f2c",
        "chat.completion",
        1767225600,
        "m",
    )
    assert cc.system_fingerprint is None
    choice = cc.choices[0]
    assert (choice.index, choice.finish_reason) == (0, "stop")
    assert choice.message.role == "assistant" and choice.message.content == "Hello."
    assert choice.message.tool_calls is None
    assert cc.usage is not None
    assert (cc.usage.prompt_tokens, cc.usage.completion_tokens, cc.usage.total_tokens) == (
        57,
        18,
        75,
    )
    assert cc.usage.prompt_tokens_details and cc.usage.prompt_tokens_details.cached_tokens == 40
    assert cc.usage.completion_tokens_details
    assert cc.usage.completion_tokens_details.reasoning_tokens == 5


def test_tool_calls_make_content_null() -> None:
    cc = chat_body(result(Choice(tool_calls=[CALL], finish_reason="tool_calls")))
    msg = cc.choices[0].message
    assert msg.content is None
    assert cc.choices[0].finish_reason == "tool_calls"
    assert msg.tool_calls is not None
    call = msg.tool_calls[0]
    assert call.type == "function"
    assert (call.id, call.function.name, call.function.arguments) == (
        "call_7Qd2",
        "get_weather",
        '{"city":"Oslo"}',
    )
    with_text = chat_body(result(Choice(text="Checking.", tool_calls=[CALL])))
    assert with_text.choices[0].message.content == "Checking."


@pytest.mark.parametrize(
    ("field", "present", "absent"),
    [
        ("reasoning_content", ["reasoning_content"], ["reasoning"]),
        ("reasoning", ["reasoning"], ["reasoning_content"]),
        ("both", ["reasoning_content", "reasoning"], []),
    ],
)
def test_reasoning_field_is_configurable(
    field: ReasoningField, present: list[str], absent: list[str]
) -> None:
    res = result(Choice(text="42", reasoning="Let me think."))
    body = encode_chat_response(
        res, request_id="chatcmpl-1", created=1, model="m", reasoning_field=field
    )
    ChatCompletion.model_validate(body, strict=True)
    message = body["choices"][0]["message"]
    for key in present:
        assert message[key] == "Let me think."
    for key in absent:
        assert key not in message
    # The SDK keeps unknown fields reachable as attributes.
    sdk_message = ChatCompletion.model_validate(body).choices[0].message
    assert getattr(sdk_message, present[0]) == "Let me think."


def test_no_reasoning_no_field() -> None:
    body = encode_chat_response(result(Choice(text="x")), request_id="c", created=1, model="m")
    assert "reasoning_content" not in body["choices"][0]["message"]


CHAT_FINISH = {
    "stop": "stop",
    "stop_sequence": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "context_exceeded": "length",
    "error": "stop",
}


@pytest.mark.parametrize("reason", get_args(FinishReason))
def test_finish_reasons(reason: FinishReason) -> None:
    cc = chat_body(result(Choice(text="x", finish_reason=reason)))
    assert cc.choices[0].finish_reason == CHAT_FINISH[reason]
    body = encode_completion_response(
        result(Choice(text="x", finish_reason=reason)), request_id="cmpl-1", created=1, model="m"
    )
    expected = "stop" if reason == "tool_calls" else CHAT_FINISH[reason]
    assert Completion.model_validate(body, strict=True).choices[0].finish_reason == expected


def test_several_choices_keep_their_index() -> None:
    cc = chat_body(
        result(Choice(index=0, text="a"), Choice(index=1, text="b", finish_reason="length"))
    )
    assert [(c.index, c.message.content, c.finish_reason) for c in cc.choices] == [
        (0, "a", "stop"),
        (1, "b", "length"),
    ]


def test_text_completion() -> None:
    body = encode_completion_response(
        result(Choice(text=" there was"), Choice(index=1, text=" a king")),
        request_id="chatcmpl-7",
        created=5,
        model="m",
    )
    comp = Completion.model_validate(body, strict=True)
    assert (comp.id, comp.object, comp.created, comp.model) == (
        "chatcmpl-7",
        "text_completion",
        5,
        "m",
    )
    assert [c.text for c in comp.choices] == [" there was", " a king"]
    assert comp.usage is not None and comp.usage.total_tokens == 75


VECTORS = [[0.1, -2.5, 3.0e-5, 1.0], [0.0, 123.456, -1e10, 7.0]]


def embedding_result() -> EmbeddingResult:
    return EmbeddingResult(model="e", vectors=VECTORS, usage=Usage(input_tokens=7))


def test_embeddings_as_floats() -> None:
    body = encode_embedding_response(embedding_result(), model="embed", encoding_format="float")
    resp = CreateEmbeddingResponse.model_validate(body, strict=True)
    assert resp.model == "embed" and resp.object == "list"
    assert [d.embedding for d in resp.data] == VECTORS
    assert [d.index for d in resp.data] == [0, 1]
    assert (resp.usage.prompt_tokens, resp.usage.total_tokens) == (7, 7)


def test_embeddings_as_base64_are_little_endian_float32() -> None:
    body = encode_embedding_response(embedding_result(), model="embed", encoding_format="base64")
    for item, vector in zip(body["data"], VECTORS, strict=True):
        raw = base64.b64decode(item["embedding"].encode("ascii"), validate=True)
        decoded = list(struct.unpack(f"<{len(raw) // 4}f", raw))
        assert decoded == pytest.approx(vector, rel=1e-6)
        # What the SDK itself produces from the payload must pass its model too.
        item["embedding"] = decoded
    CreateEmbeddingResponse.model_validate(body, strict=True)


def test_models() -> None:
    one = encode_model("org/qwen3-8b", created=1767225600)
    model = Model.model_validate(one, strict=True)
    assert (model.id, model.owned_by, model.object) == ("org/qwen3-8b", "mindrouter", "model")
    listing = encode_model_list(["a", "b"], created=3, owned_by="gw")
    assert listing["object"] == "list"
    assert [Model.model_validate(m, strict=True).id for m in listing["data"]] == ["a", "b"]
    assert encode_model_list([], created=1) == {"object": "list", "data": []}
