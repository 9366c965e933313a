"""The OpenAI Responses API (/v1/responses) in front of every backend type, checked with the
official SDK and validated with its models in strict mode: unary and streamed replies, tool calls
and their results, reasoning, JSON output, stored responses and chains, errors."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import (
    Response,
    ResponseItemList,
    ResponseStreamEvent,
)
from pydantic import TypeAdapter

from mindrouter.stores.audit_records import AuditEntry, AuditFilter
from tests.gateway.databases import stores_at
from tests.gateway.stack import ENGINES, Stack

EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
    "strict": False,
}


def create(stack: Stack, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key or stack.key}"}
    return httpx.post(stack.url + "/v1/responses", json=body, headers=headers, timeout=30)


def strict(body: dict[str, Any]) -> Response:
    return Response.model_validate(body, strict=True)


def stream_events(stack: Stack, body: dict[str, Any]) -> list[Any]:
    """Every event of a streamed response, each validated strictly; the `event:` line must
    repeat the payload's type and the sequence numbers count up from 0."""
    events = []
    names = []
    headers = {"Authorization": f"Bearer {stack.key}"}
    with httpx.stream(
        "POST", stack.url + "/v1/responses", json={**body, "stream": True}, headers=headers
    ) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event: "):
                names.append(line[7:])
            elif line.startswith("data: "):
                events.append(EVENTS.validate_python(json.loads(line[6:]), strict=True))
    assert [e.type for e in events] == names
    assert [e.sequence_number for e in events] == list(range(len(events)))
    return events


def audit_of(stack: Stack, request_id: str) -> AuditEntry:
    async def find() -> AuditEntry:
        async with stores_at(stack.database_url) as stores:
            for _ in range(100):
                entries = await stores.audit_log.query(AuditFilter(limit=50))
                found = [e for e in entries if e.request_id == request_id]
                if found and found[0].status != "pending":
                    return found[0]
                await asyncio.sleep(0.05)
        raise AssertionError(f"no completed audit record for {request_id}")

    return asyncio.run(find())


async def _second_user(stack: Stack) -> str:
    async with stores_at(stack.database_url) as stores:
        await stores.directory.create_user("intruder", "testers")
        created = await stores.keys.create_key("intruder")
        return str(created.key)


@pytest.mark.parametrize("engine", ENGINES)
def test_unary_text_validates_and_is_accounted(stack: Stack, engine: str) -> None:
    r = create(stack, {"model": f"chat-{engine}", "input": "Hello there", "store": False})
    assert r.status_code == 200, r.text
    resp = strict(r.json())
    assert resp.id.startswith("resp_") and resp.object == "response"
    assert resp.status == "completed" and resp.model == f"chat-{engine}"
    assert resp.output_text
    message = resp.output[0]
    assert message.type == "message" and message.role == "assistant"
    usage = resp.usage
    assert usage is not None and usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    record = audit_of(stack, r.headers["x-request-id"])
    assert record.status == "ok" and record.endpoint == "/v1/responses"
    assert (record.input_tokens, record.output_tokens) == (usage.input_tokens, usage.output_tokens)
    engine_record = stack.sim_state(engine).records[-1]
    assert engine_record.completion_tokens == usage.output_tokens


@pytest.mark.parametrize("engine", ENGINES)
def test_streamed_text_follows_the_event_order(stack: Stack, engine: str) -> None:
    events = stream_events(stack, {"model": f"chat-{engine}", "input": "Tell me a story"})
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) >= 2
    final = events[-1].response
    assert final.status == "completed"
    assert final.output_text == "".join(deltas)
    assert events[-4].text == final.output_text
    assert final.usage is not None and final.usage.output_tokens > 0
    item_ids = {e.item_id for e in events if hasattr(e, "item_id")}
    assert item_ids == {final.output[0].id}


@pytest.mark.parametrize("engine", ENGINES)
def test_tool_call_and_its_result_streamed(stack: Stack, engine: str) -> None:
    body = {"model": f"chat-{engine}", "input": "Weather in Oslo?", "tools": [WEATHER]}
    events = stream_events(stack, body)
    final = events[-1].response
    calls = [item for item in final.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    args = json.loads(calls[0].arguments)
    assert set(args) >= {"city", "days"}
    fragments = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert "".join(fragments) == calls[0].arguments
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done and done[0].arguments == calls[0].arguments
    # The tool's result goes back as a function_call_output item; the reply is then text.
    follow = {
        "model": f"chat-{engine}",
        "tools": [WEATHER],
        "input": [
            {"role": "user", "content": "Weather in Oslo?"},
            calls[0].model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "4 C"},
        ],
    }
    second = stream_events(stack, follow)[-1].response
    assert second.status == "completed" and second.output_text
    seen = stack.sim_state(engine).records[-1].body
    assert "4 C" in json.dumps(seen)


def test_official_sdk_calls_and_stream_helper(stack: Stack, oai: openai.OpenAI) -> None:
    resp = oai.responses.create(model="chat-vllm", input="Hi", instructions="Be brief.")
    assert resp.output_text and resp.instructions == "Be brief."
    with oai.responses.stream(model="chat-ollama", input="Hi", tools=[WEATHER]) as s:  # type: ignore[list-item]
        final = s.get_final_response()
    assert any(item.type == "function_call" for item in final.output)
    retrieved = oai.responses.retrieve(resp.id)
    assert retrieved.id == resp.id and retrieved.output_text == resp.output_text
    items = oai.responses.input_items.list(resp.id)
    assert isinstance(items, openai.pagination.SyncCursorPage)
    assert [i.type for i in items.data] == ["message"]
    count = oai.responses.input_tokens.count(model="chat-vllm", input="Hello there, how are you?")
    assert count.input_tokens > 0
    deleted = oai.responses.delete(resp.id)
    assert deleted is None
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(resp.id)


def test_a_chain_of_three_turns_keeps_its_history(stack: Stack) -> None:
    first = strict(create(stack, {"model": "chat-llamacpp", "input": "My name is Ada."}).json())
    second = strict(
        create(
            stack,
            {"model": "chat-llamacpp", "input": "Remember it.", "previous_response_id": first.id},
        ).json()
    )
    third_raw = create(
        stack,
        {"model": "chat-llamacpp", "input": "What is my name?", "previous_response_id": second.id},
    )
    third = strict(third_raw.json())
    assert third.previous_response_id == second.id
    sent = stack.sim_state("llamacpp").records[-1].body["messages"]
    texts = [
        m["content"] if isinstance(m["content"], str) else m["content"][0]["text"] for m in sent
    ]
    assert texts == [
        "My name is Ada.",
        first.output_text,
        "Remember it.",
        second.output_text,
        "What is my name?",
    ]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    listed = httpx.get(
        f"{stack.url}/v1/responses/{third.id}/input_items?order=asc", headers=stack.auth
    )
    page = ResponseItemList.model_validate(listed.json(), strict=True)
    assert [item.type for item in page.data] == ["message"] and not page.has_more


def test_another_users_response_is_not_found(stack: Stack) -> None:
    mine = strict(create(stack, {"model": "chat-vllm", "input": "Secret plans"}).json())
    other_key = asyncio.run(_second_user(stack))
    r = create(
        stack, {"model": "chat-vllm", "input": "And?", "previous_response_id": mine.id}, other_key
    )
    assert r.status_code == 404
    assert r.json()["error"]["message"].startswith("previous_response_id:")
    headers = {"Authorization": f"Bearer {other_key}"}
    for method, path in (
        ("GET", f"/v1/responses/{mine.id}"),
        ("DELETE", f"/v1/responses/{mine.id}"),
        ("GET", f"/v1/responses/{mine.id}/input_items"),
    ):
        r = httpx.request(method, stack.url + path, headers=headers)
        assert r.status_code == 404, (method, path)
        assert r.json()["error"]["code"] == "not_found"
        assert "Secret" not in r.text
    assert httpx.get(f"{stack.url}/v1/responses/{mine.id}", headers=stack.auth).status_code == 200


def test_store_false_keeps_nothing(stack: Stack) -> None:
    resp = strict(create(stack, {"model": "chat-vllm", "input": "Hi", "store": False}).json())
    assert resp.store is False
    assert httpx.get(f"{stack.url}/v1/responses/{resp.id}", headers=stack.auth).status_code == 404


def test_reasoning_comes_out_as_an_item_and_as_a_summary(stack: Stack) -> None:
    unary = strict(
        create(
            stack, {"model": "think-vllm", "input": "Why?", "reasoning": {"effort": "low"}}
        ).json()
    )
    kinds = [item.type for item in unary.output]
    assert kinds == ["reasoning", "message"]
    assert unary.output[0].content and unary.output[0].content[0].text  # type: ignore[union-attr]
    events = stream_events(
        stack, {"model": "think-ollama", "input": "Why?", "reasoning": {"summary": "auto"}}
    )
    kinds = [e.type for e in events]
    assert "response.reasoning_summary_text.delta" in kinds
    assert kinds.index("response.reasoning_summary_part.done") < kinds.index(
        "response.content_part.added"
    )
    final = events[-1].response
    assert final.output[0].type == "reasoning" and final.output[0].summary  # type: ignore[union-attr]


def test_json_schema_output(stack: Stack) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    body = {
        "model": "chat-vllm",
        "input": "A person",
        "text": {"format": {"type": "json_schema", "name": "person", "schema": schema}},
        "max_output_tokens": 200,
    }
    resp = strict(create(stack, body).json())
    value = json.loads(resp.output_text)
    assert isinstance(value["name"], str) and isinstance(value["age"], int)
    assert resp.text is not None and resp.text.format is not None
    assert resp.text.format.type == "json_schema"


def test_what_codex_sends_is_accepted(stack: Stack) -> None:
    """The shape of a Codex turn: developer and user items, hosted tools offered, a namespace
    of tools, reasoning summary, store false, includes and cache keys."""
    body = {
        "model": "chat-vllm",
        "instructions": "You are a coding agent.",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "Sandbox: none"}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "List files"}],
            },
        ],
        "tools": [
            {**WEATHER, "name": "exec_command"},
            {"type": "web_search"},
            {
                "type": "namespace",
                "name": "mcp_files",
                "description": "File tools",
                "tools": [
                    {"type": "function", "name": "read_file", "parameters": {"type": "object"}}
                ],
            },
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "abc",
        "client_metadata": {"x": "y"},
    }
    events = stream_events(stack, body)
    final = events[-1].response
    assert final.status == "completed"
    assert [t.name for t in final.tools] == ["exec_command", "read_file"]  # type: ignore[union-attr]
    sent = stack.sim_state("vllm").records[-1].body
    assert [t["function"]["name"] for t in sent["tools"]] == ["exec_command", "read_file"]
    assert "client_metadata" not in sent and "include" not in sent
    # The instructions and the developer item, as one leading system message for vLLM.
    assert sent["messages"] == [
        {"role": "system", "content": "You are a coding agent.\n\nSandbox: none"},
        {"role": "user", "content": "List files"},
    ]


def test_a_call_from_a_namespace_is_reported_under_it(stack: Stack) -> None:
    body = {
        "model": "chat-vllm",
        "input": "Read it",
        "tools": [{"type": "namespace", "name": "files", "description": "d", "tools": [WEATHER]}],
        "tool_choice": {"type": "function", "name": "get_weather"},
    }
    resp = strict(create(stack, body).json())
    call = resp.output[-1]
    assert call.type == "function_call" and call.namespace == "files"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "hi"}, "model"),
        ({"model": "chat-vllm"}, "input"),
        ({"model": "chat-vllm", "input": 5}, "input"),
        ({"model": "chat-vllm", "input": [{"type": "bogus"}]}, "input[0].type"),
        ({"model": "chat-vllm", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        (
            {
                "model": "chat-vllm",
                "input": [{"role": "user", "content": [{"type": "input_file"}]}],
            },
            "input[0].content[0]",
        ),
        (
            {"model": "chat-vllm", "input": [{"type": "web_search_call", "id": "x"}]},
            "input[0].type",
        ),
        (
            {
                "model": "chat-vllm",
                "input": [
                    {
                        "role": "user",
                        "content": [{"type": "input_image", "image_url": "data:image/png;base64,"}],
                    }
                ],
            },
            "input[0].content[0].image_url",
        ),
        (
            {
                "model": "chat-vllm",
                "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}],
            },
            "input[0].arguments",
        ),
        ({"model": "chat-vllm", "input": "x", "tools": [{"type": "alien"}]}, "tools[0].type"),
        (
            {
                "model": "chat-vllm",
                "input": "x",
                "tools": [{"type": "web_search"}],
                "tool_choice": {"type": "web_search"},
            },
            "tool_choice",
        ),
        (
            {
                "model": "chat-vllm",
                "input": "x",
                "tool_choice": {"type": "function", "name": "nope"},
            },
            "tool_choice.name",
        ),
        ({"model": "chat-vllm", "input": "x", "temperature": "hot"}, "temperature"),
        ({"model": "chat-vllm", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        (
            {"model": "chat-vllm", "input": "x", "text": {"format": {"type": "xml"}}},
            "text.format.type",
        ),
        ({"model": "chat-vllm", "input": "x", "reasoning": {"effort": "huge"}}, "reasoning.effort"),
        ({"model": "chat-vllm", "input": "x", "metadata": {"k": 1}}, "metadata.k"),
        ({"model": "chat-vllm", "input": "x", "conversation": "conv_1"}, "conversation"),
        ({"model": "chat-vllm", "input": "x", "stream": "yes"}, "stream"),
        ({"model": "chat-vllm", "input": "x", "previous_response_id": 7}, "previous_response_id"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    stack: Stack, body: dict[str, Any], param: str
) -> None:
    r = create(stack, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param, error
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith(param)


def test_unknown_model_and_unknown_previous_response(stack: Stack) -> None:
    r = create(stack, {"model": "no-such-model", "input": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = create(stack, {"model": "chat-vllm", "input": "x", "previous_response_id": "resp_nope"})
    assert r.status_code == 404 and "resp_nope" in r.json()["error"]["message"]
    r = httpx.post(stack.url + "/v1/responses", json={"model": "chat-vllm", "input": "x"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"


def test_a_backend_failure_mid_stream_ends_with_response_failed(stack: Stack) -> None:
    state = stack.sim_state("ollama")
    state.config.drop_after = 3
    try:
        events = stream_events(stack, {"model": "chat-ollama", "input": "Long story please"})
    finally:
        state.config.drop_after = None
    final = events[-1]
    assert final.type == "response.failed"
    assert final.response.status == "failed" and final.response.error is not None
    assert time.time() - final.response.created_at < 60


@pytest.mark.parametrize("stream", [False, True])
def test_the_output_limit_leaves_the_response_incomplete(stack: Stack, stream: bool) -> None:
    body = {"model": "chat-llamacpp", "input": "A long story", "max_output_tokens": 3}
    if stream:
        events = stream_events(stack, body)
        assert events[-1].type == "response.incomplete"
        resp = events[-1].response
    else:
        resp = strict(create(stack, body).json())
    assert resp.status == "incomplete" and resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.output[0].status == "incomplete"  # type: ignore[union-attr]
    assert resp.usage is not None and resp.usage.output_tokens == 3
