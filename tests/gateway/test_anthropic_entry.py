"""The Anthropic entry point (/anthropic/v1/...) in front of every backend type, driven with the
official `anthropic` SDK and checked against its strict models.

The helpers at the top read responses raw (httpx) and validate every body and every stream event
with the SDK's pydantic types; `test_matrix_anthropic.py` uses them for the feature matrix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import pydantic
import pytest
from anthropic.types import Message, MessageParam, MessageTokensCount, RawMessageStreamEvent

from mindrouter.canonical import (
    Done,
    Finish,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from mindrouter.dialects.anthropic import MessagesStreamEncoder, verify_thinking
from tests.gateway.stack import ENGINES, Stack

MESSAGES = "/anthropic/v1/messages"
COUNT_TOKENS = "/anthropic/v1/messages/count_tokens"
# The stack's `secret_key`: the gateway signs thinking blocks with it.
SIGNING_KEY = b"test-secret"
EVENT = pydantic.TypeAdapter(RawMessageStreamEvent)
# One client for every raw call: building an httpx client (its TLS context) costs ~35 ms.
HTTP = httpx.Client(timeout=30)

# The simulator fills a tool's arguments from its schema, taking `const` values as they are, so
# this note puts escapes and multi-byte characters into the JSON the backend streams.
NOTE = 'naïve "quoted" \\ back-slash — 雪 😀'
WEATHER_TOOL: dict[str, Any] = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer"},
            "note": {"type": "string", "const": NOTE},
        },
        "required": ["city", "unit", "days"],
    },
}
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32


@pytest.fixture(scope="module")
def claude(stack: Stack) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.url + "/anthropic", api_key=stack.key, max_retries=0)


# -- raw helpers (shared with the matrix) ------------------------------------------------------


def post_message(stack: Stack, body: dict[str, Any]) -> Message:
    """A non-streamed reply, validated strictly."""
    r = HTTP.post(stack.url + MESSAGES, json=body, headers=stack.auth)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    message = Message.model_validate(r.json())
    assert message.id.startswith("msg_")
    assert r.headers["request-id"]
    return message


def read_events(stack: Stack, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of a streamed reply, raw: each one must have an `event:` line naming its type."""
    events: list[dict[str, Any]] = []
    with HTTP.stream("POST", stack.url + MESSAGES, json=body, headers=stack.auth) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        name: str | None = None
        for line in r.iter_lines():
            if not line:
                name = None
            elif line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                payload = line[len("data: ") :]
                assert payload != "[DONE]", "Anthropic streams have no [DONE] sentinel"
                data = json.loads(payload)
                # The SDK drops events without an `event:` line.
                assert name == data["type"], (name, data)
                events.append(data)
            else:
                assert line.startswith(":"), line
    return events


@dataclass
class Streamed:
    """A streamed reply folded into a message, with what only the stream shows."""

    message: Message
    events: list[dict[str, Any]]
    # The concatenated `partial_json` of each tool_use block, and how many pieces it came in.
    tool_json: dict[int, str] = field(default_factory=dict)
    tool_pieces: dict[int, int] = field(default_factory=dict)
    start_usage: dict[str, Any] = field(default_factory=dict)


_DELTAS_BY_BLOCK = {
    "text": ("text_delta",),
    "thinking": ("thinking_delta", "signature_delta"),
    "tool_use": ("input_json_delta",),
}


def fold_events(events: list[dict[str, Any]]) -> Streamed:
    """Checks the event sequence the SDK's accumulator relies on, and folds it into a Message.

    message_start first (empty content, usage present); blocks numbered 0, 1, 2… that never
    interleave; a thinking block's single signature_delta right before its stop; one
    message_delta, then message_stop last.
    """
    for event in events:
        EVENT.validate_python(event)
    types = [e["type"] for e in events]
    assert types[0] == "message_start" and types[-1] == "message_stop", types
    assert types.count("message_start") == 1 and types.count("message_stop") == 1
    assert types.count("message_delta") == 1 and types[-2] == "message_delta", types
    assert "error" not in types
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    streamed = Streamed(message=None, events=events, start_usage=dict(start["usage"]))  # type: ignore[arg-type]
    blocks: list[dict[str, Any]] = []
    open_index: int | None = None
    signed = False
    for event in events[1:-2]:
        kind = event["type"]
        if kind == "ping":
            continue
        if kind == "content_block_start":
            assert open_index is None, "blocks must not interleave"
            assert event["index"] == len(blocks), "block indexes must be contiguous"
            blocks.append(dict(event["content_block"]))
            open_index = event["index"]
            signed = False
        elif kind == "content_block_delta":
            index = event["index"]
            assert index == open_index, "a delta for a block that is not open"
            assert not signed, "nothing may follow a signature_delta"
            block = blocks[index]
            delta = event["delta"]
            assert delta["type"] in _DELTAS_BY_BLOCK[block["type"]], (block, delta)
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
                signed = True
            else:
                piece = delta["partial_json"]
                streamed.tool_json[index] = streamed.tool_json.get(index, "") + piece
                streamed.tool_pieces[index] = streamed.tool_pieces.get(index, 0) + 1
        elif kind == "content_block_stop":
            index = event["index"]
            assert index == open_index, "a stop for a block that is not open"
            block = blocks[index]
            if block["type"] == "thinking":
                assert signed and block["signature"], "a thinking block must be signed"
            if block["type"] == "tool_use":
                block["input"] = json.loads(streamed.tool_json.get(index) or "{}")
            open_index = None
        else:
            raise AssertionError(f"unexpected event {kind!r} inside the message")
    assert open_index is None, "a block was never closed"
    final = events[-2]
    message = {**start, "content": blocks, **final["delta"]}
    message["usage"] = {**start["usage"], **final["usage"]}
    streamed.message = Message.model_validate(message)
    return streamed


def stream_message(stack: Stack, body: dict[str, Any]) -> Streamed:
    return fold_events(read_events(stack, {**body, "stream": True}))


def run(stack: Stack, body: dict[str, Any], stream: bool) -> Message:
    """The reply to `body`, streamed or not; either way a strictly validated Message."""
    if stream:
        return stream_message(stack, body).message
    return post_message(stack, body)


def text_of(message: Message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def last_backend_request(stack: Stack, engine: str) -> tuple[str, dict[str, Any]]:
    """The route and body of the last generation request the engine received."""
    routes = ("/v1/chat/completions", "/api/chat", "/v1/completions", "/api/generate")
    record = next(r for r in reversed(stack.sim_state(engine).records) if r.route in routes)
    assert isinstance(record.body, dict)
    return record.route, record.body


def backend_tool_arguments(stack: Stack, engine: str) -> str | dict[str, Any]:
    """The arguments the backend generated for the last tool call it was asked for.

    The simulator's reply depends only on the prompt, so sending the recorded request again,
    unstreamed and straight to the engine, yields the same arguments: JSON text from an
    OpenAI-style engine, an object from Ollama.
    """
    route, body = last_backend_request(stack, engine)
    replay = {k: v for k, v in body.items() if k != "stream_options"}
    replay["stream"] = False
    sim = stack.sims["vllm" if engine == "openai" else engine]
    r = HTTP.post(sim.url + route, json=replay)
    assert r.status_code == 200, r.text
    data = r.json()
    if engine == "ollama":
        arguments: dict[str, Any] = data["message"]["tool_calls"][0]["function"]["arguments"]
        return arguments
    text: str = data["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    return text


# -- the SDK against every backend ------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_create(claude: anthropic.Anthropic, engine: str) -> None:
    raw = claude.messages.with_raw_response.create(
        model=f"chat-{engine}", max_tokens=256, messages=[{"role": "user", "content": "Hello"}]
    )
    strict = Message.model_validate(raw.http_response.json())
    assert raw.http_response.headers["request-id"] == raw.request_id
    message = raw.parse()
    assert message.id == strict.id and message.model == f"chat-{engine}"
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert text_of(message) and message.usage.output_tokens == len(text_of(message).split())
    assert message.usage.input_tokens > 0


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_stream_text(claude: anthropic.Anthropic, engine: str) -> None:
    body: dict[str, Any] = {
        "model": f"chat-{engine}",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "Stream please"}],
    }
    with claude.messages.stream(**body) as s:
        pieces = list(s.text_stream)
        final = s.get_final_message()
    assert len(pieces) >= 3 and "".join(pieces) == text_of(final)
    assert final.stop_reason == "end_turn"
    # The same request unstreamed: the same reply and the same usage.
    whole = claude.messages.create(**body)
    assert text_of(whole) == text_of(final)
    assert whole.usage.input_tokens == final.usage.input_tokens
    assert whole.usage.output_tokens == final.usage.output_tokens


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_streamed_tool_input_is_the_backend_json(
    stack: Stack, claude: anthropic.Anthropic, engine: str
) -> None:
    with claude.messages.stream(
        model=f"chat-{engine}",
        max_tokens=256,
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
    ) as s:
        pieces = [
            e.delta.partial_json
            for e in s
            if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
        ]
        final = s.get_final_message()
    produced = backend_tool_arguments(stack, engine)
    assert final.stop_reason == "tool_use"
    (call,) = final.content
    assert call.type == "tool_use" and call.name == "get_weather" and call.id
    if isinstance(produced, str):
        # OpenAI-style engines stream the arguments in pieces that split strings, escapes and
        # multi-byte characters; the client gets those pieces unchanged.
        assert len(pieces) >= 3
        assert "".join(pieces) == produced
        assert call.input == json.loads(produced)
    else:
        # Ollama sends each call whole; it reaches the client as one input_json_delta.
        assert len(pieces) == 1
        assert json.loads(pieces[0]) == produced
        assert call.input == produced
    assert call.input["note"] == NOTE


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_sdk_thinking_replayed_next_turn(
    stack: Stack, claude: anthropic.Anthropic, engine: str, stream: bool
) -> None:
    first_turn: list[Any] = [{"role": "user", "content": "Think first"}]
    kwargs: dict[str, Any] = {
        "model": f"think-{engine}",
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    if stream:
        with claude.messages.stream(messages=first_turn, **kwargs) as s:
            first = s.get_final_message()
    else:
        first = claude.messages.create(messages=first_turn, **kwargs)
    thinking, text = first.content
    assert thinking.type == "thinking" and thinking.thinking and text.type == "text"
    assert thinking.signature.startswith("gw1:")
    assert verify_thinking(thinking.thinking, thinking.signature, SIGNING_KEY)

    # What client code does: the reply's content goes back as it is, plus a new user turn.
    second = claude.messages.create(
        messages=[
            *first_turn,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": "And then?"},
        ],
        **kwargs,
    )
    assert second.stop_reason == "end_turn" and text_of(second)
    _, body = last_backend_request(stack, engine)
    assistant = body["messages"][-2]
    assert assistant["role"] == "assistant" and assistant["content"] == text.text
    replayed = {
        "vllm": "reasoning",
        "llamacpp": "reasoning_content",
        "ollama": "thinking",
        # A generic OpenAI server has no field for it: the thinking is dropped.
        "openai": None,
    }[engine]
    if replayed is not None:
        assert assistant[replayed] == thinking.thinking


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_thinking_and_tool_loop(claude: anthropic.Anthropic, engine: str) -> None:
    kwargs: dict[str, Any] = {
        "model": f"think-{engine}",
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [WEATHER_TOOL],
    }
    question: MessageParam = {"role": "user", "content": "Weather in Oslo?"}
    with claude.messages.stream(messages=[question], **kwargs) as s:
        first = s.get_final_message()
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    assert first.stop_reason == "tool_use"
    call = first.content[1]
    assert call.type == "tool_use"
    answer: MessageParam = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "4°C, rain"}],
    }
    with claude.messages.stream(
        messages=[question, {"role": "assistant", "content": first.content}, answer], **kwargs
    ) as s:
        second = s.get_final_message()
    assert second.stop_reason == "end_turn"
    assert [b.type for b in second.content] == ["thinking", "text"]


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_count_tokens(stack: Stack, claude: anthropic.Anthropic, engine: str) -> None:
    messages: list[Any] = [{"role": "user", "content": "How many tokens is this?"}]
    tokenized = stack.sim_state(engine).requests_total[("/tokenize", "200")]
    raw = claude.messages.with_raw_response.count_tokens(
        model=f"chat-{engine}", messages=messages, system="Be brief."
    )
    counted = MessageTokensCount.model_validate(raw.http_response.json())
    assert counted.input_tokens > 0
    if engine == "vllm":
        # vLLM's /tokenize renders the chat (messages and tools) with the model's template.
        assert stack.sim_state(engine).requests_total[("/tokenize", "200")] == tokenized + 1
    with_tools = claude.messages.count_tokens(
        model=f"chat-{engine}",
        messages=messages,
        system="Be brief.",
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    assert with_tools.input_tokens > counted.input_tokens
    if engine in ("vllm", "llamacpp"):
        # Engines with a tokenizer endpoint count exactly what the generation will see.
        used = claude.messages.create(
            model=f"chat-{engine}", max_tokens=64, messages=messages, system="Be brief."
        )
        assert counted.input_tokens == used.usage.input_tokens


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_sampling_through_extra_body(
    stack: Stack, claude: anthropic.Anthropic, engine: str
) -> None:
    # anthropic 2.14 dropped temperature, top_p and top_k from create()'s signature.
    claude.messages.create(
        model=f"chat-{engine}",
        max_tokens=64,
        messages=[{"role": "user", "content": "x"}],
        extra_body={"temperature": 0.25, "top_p": 0.5, "top_k": 7},
    )
    _, body = last_backend_request(stack, engine)
    sampling = body.get("options", body) if engine == "ollama" else body
    assert sampling["temperature"] == 0.25 and sampling["top_p"] == 0.5
    if engine == "openai":
        # A generic OpenAI server is sent only standard OpenAI fields.
        assert "top_k" not in sampling
    else:
        assert sampling["top_k"] == 7


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_typed_errors(claude: anthropic.Anthropic, engine: str) -> None:
    user: list[Any] = [{"role": "user", "content": "x"}]
    with pytest.raises(anthropic.NotFoundError) as not_found:
        claude.messages.create(model="no-such-model", max_tokens=16, messages=user)
    assert not_found.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with (
        pytest.raises(anthropic.NotFoundError),
        claude.messages.stream(model="no-such-model", max_tokens=16, messages=user) as s,
    ):
        s.get_final_message()
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.count_tokens(model="no-such-model", messages=user)
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude.messages.create(
            model=f"chat-{engine}",
            max_tokens=2000,
            thinking={"type": "enabled", "budget_tokens": 10},
            messages=user,
        )
    assert "budget_tokens" in str(bad.value)
    with pytest.raises(anthropic.BadRequestError) as no_vision:
        claude.messages.create(
            model=f"chat-{engine}",
            max_tokens=16,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": "iVBORw0KGgo=",
                            },
                        }
                    ],
                }
            ],
        )
    assert "does not accept images" in str(no_vision.value)
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model=f"embed-{engine}", max_tokens=16, messages=user)


def test_sdk_models_list(claude: anthropic.Anthropic) -> None:
    ids = [m.id for m in claude.models.list()]
    for engine in ENGINES:
        assert f"chat-{engine}" in ids and f"think-{engine}" in ids


def test_x_api_key_and_any_version_accepted(stack: Stack) -> None:
    r = HTTP.post(
        stack.url + MESSAGES,
        json={
            "model": "chat-vllm",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "x"}],
        },
        headers={
            "x-api-key": stack.key,
            "anthropic-version": "2099-01-01",
            "anthropic-beta": "a,b",
        },
    )
    assert r.status_code == 200, r.text
    Message.model_validate(r.json())


# -- the stream encoder with argument fragments cut at every possible point ---------------------


def _encode(events: list[StreamEvent]) -> list[dict[str, Any]]:
    encoder = MessagesStreamEncoder(
        message_id="msg_test", model="m", input_tokens_hint=lambda: 5, signing_key=SIGNING_KEY
    )
    raw = encoder.start() + b"".join(encoder.encode(e) for e in events)
    out: list[dict[str, Any]] = []
    for chunk in raw.decode().split("\n\n"):
        if not chunk:
            continue
        name_line, data_line = chunk.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert name_line == "event: " + data["type"]
        out.append(data)
    return out


def test_tool_arguments_survive_any_fragment_boundary() -> None:
    arguments = json.dumps(
        {"city": "Zürich", "note": NOTE, "n": [1, 2.5, None]}, ensure_ascii=False
    )
    escaped = json.dumps({"note": NOTE})  # \uXXXX escapes, including a surrogate pair
    for text in (arguments, escaped):
        for cut in range(len(text) + 1):
            for second_cut in (cut, min(len(text), cut + 1), min(len(text), cut + 7)):
                pieces = [text[:cut], text[cut:second_cut], text[second_cut:]]
                events: list[StreamEvent] = [
                    ReasoningDelta("hmm"),
                    ToolCallStart(0, "call_1", "f"),
                    *(ToolCallArgs(0, p) for p in pieces),
                    ToolCallEnd(0),
                    Finish("tool_calls"),
                    Done(Usage(input_tokens=5, output_tokens=9)),
                ]
                streamed = fold_events(_encode(events))
                thinking, call = streamed.message.content
                assert thinking.type == "thinking" and call.type == "tool_use"
                assert streamed.tool_json[1] == text
                assert call.input == json.loads(text)
                assert streamed.message.stop_reason == "tool_use"


def test_text_between_parallel_tool_fragments_is_held_in_order() -> None:
    # OpenAI-style streams may interleave two calls' fragments; Anthropic blocks may not.
    events: list[StreamEvent] = [
        ToolCallStart(0, "call_a", "a"),
        ToolCallArgs(0, '{"x":'),
        ToolCallStart(1, "call_b", "b"),
        ToolCallArgs(1, '{"y":'),
        ToolCallArgs(0, "1}"),
        TextDelta("late text"),
        ToolCallArgs(1, "2}"),
        ToolCallEnd(0),
        ToolCallEnd(1),
        Finish("tool_calls"),
        Done(Usage(input_tokens=5, output_tokens=9)),
    ]
    message = fold_events(_encode(events)).message
    assert [b.type for b in message.content] == ["tool_use", "tool_use", "text"]
    assert [b.input for b in message.content if b.type == "tool_use"] == [{"x": 1}, {"y": 2}]


def test_the_sdk_pointed_at_the_root(stack: Stack) -> None:
    """`ANTHROPIC_BASE_URL` at the gateway's root, as most guides say: `/v1/messages` (with
    Claude Code's `?beta=true`), `/v1/messages/count_tokens` and the model list all answer."""
    root = anthropic.Anthropic(base_url=stack.url, api_key=stack.key, max_retries=0)
    user = [{"role": "user", "content": "Hi"}]
    made = root.beta.messages.create(
        model="chat-llamacpp", max_tokens=16, messages=user, betas=["context-management-2025-06-27"]
    )
    assert made.content and made.content[0].type == "text"
    with root.messages.stream(model="chat-ollama", max_tokens=16, messages=user) as stream:
        assert stream.get_final_message().usage.output_tokens > 0
    counted = root.messages.count_tokens(model="chat-vllm", messages=user)
    assert counted.input_tokens > 0
    assert "chat-vllm" in [m.id for m in root.models.list()]
