"""The Ollama simulator driven by the official ollama SDK and checked with its pydantic models."""

from __future__ import annotations

import json
import math

import ollama
import pytest

from .support import Sim

HI = [{"role": "user", "content": "Hello there"}]
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    },
}


def ndjson(text: str) -> list[dict[str, object]]:
    lines = text.split("\n")
    assert lines[-1] == "" and all(lines[:-1]), "one JSON object per line, nothing else"
    return [json.loads(line) for line in lines[:-1]]


def test_chat(ollama_sim: Sim) -> None:
    with ollama_sim.http() as http:
        raw = http.post(
            "/api/chat", json={"model": "sim-chat", "messages": HI, "stream": False}
        ).json()
    reply = ollama.ChatResponse.model_validate(raw)
    assert reply.done is True and reply.done_reason == "stop"
    assert reply.model == "sim-chat:latest"
    assert reply.eval_count == 24 and len((reply.message.content or "").split(" ")) == 24
    for field in ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration"):
        assert isinstance(raw[field], int) and raw[field] > 0
    assert raw["created_at"].endswith("Z") and len(raw["created_at"].split(".")[1]) == 10
    sdk = ollama_sim.ollama().chat(model="sim-chat", messages=HI)
    assert sdk.message.content == reply.message.content
    assert sdk.prompt_eval_count == reply.prompt_eval_count


def test_chat_stream_is_ndjson_and_streams_by_default(ollama_sim: Sim) -> None:
    with ollama_sim.http() as http:
        response = http.post("/api/chat", json={"model": "sim-chat", "messages": HI})
    assert response.headers["content-type"] == "application/x-ndjson"
    lines = ndjson(response.text)
    parsed = [ollama.ChatResponse.model_validate(line) for line in lines]
    assert [p.done for p in parsed] == [False] * 24 + [True]
    final = parsed[-1]
    assert final.done_reason == "stop" and final.eval_count == 24 and final.message.content == ""
    assert "eval_count" not in lines[0]
    chunks = list(ollama_sim.ollama().chat(model="sim-chat", messages=HI, stream=True))
    assert "".join(c.message.content or "" for c in chunks) == "".join(
        p.message.content or "" for p in parsed
    )


def test_generate(ollama_sim: Sim) -> None:
    client = ollama_sim.ollama()
    done = client.generate(
        model="sim-chat", prompt="Why is the sky blue?", options={"num_predict": 5}
    )
    ollama.GenerateResponse.model_validate(done.model_dump())
    assert done.done_reason == "length" and done.eval_count == 5
    assert done.context and len(done.context) > done.prompt_eval_count  # type: ignore[operator]
    streamed = list(client.generate(model="sim-chat", prompt="Why is the sky blue?", stream=True))
    assert streamed[-1].done and streamed[-1].context
    assert all(not c.done for c in streamed[:-1])
    load = client.generate(model="sim-chat", prompt="")
    assert load.done_reason == "load"
    stopped = client.generate(model="sim-chat", prompt="STOPTEST", options={"stop": ["END"]})
    assert stopped.response == "alpha beta " and stopped.done_reason == "stop"


def test_embed_and_legacy_embeddings(ollama_sim: Sim) -> None:
    client = ollama_sim.ollama()
    embedded = client.embed(model="sim-embed", input=["one", "two"])
    ollama.EmbedResponse.model_validate(embedded.model_dump())
    assert len(embedded.embeddings) == 2
    assert all(math.isclose(sum(v * v for v in e), 1, rel_tol=1e-5) for e in embedded.embeddings)
    assert embedded.prompt_eval_count == 2
    legacy = client.embeddings(model="sim-embed", prompt="one")
    ollama.EmbeddingsResponse.model_validate(legacy.model_dump())
    norm = math.sqrt(sum(v * v for v in legacy.embedding))
    assert not math.isclose(norm, 1, rel_tol=1e-3)
    assert [v / norm for v in legacy.embedding] == pytest.approx(list(embedded.embeddings[0]), 1e-5)
    with pytest.raises(ollama.ResponseError) as caught:
        client.embed(model="sim-chat", input="x")
    assert caught.value.status_code == 400


def test_list_ps_show(ollama_sim: Sim) -> None:
    client = ollama_sim.ollama()
    listed = client.list()
    ollama.ListResponse.model_validate(listed.model_dump())
    assert [m.model for m in listed.models] == [m.name for m in ollama_sim.config.models]
    client.chat(model="sim-vision", messages=HI)
    ps = client.ps()
    ollama.ProcessResponse.model_validate(ps.model_dump())
    loaded = {m.model: m for m in ps.models}
    assert "sim-vision:latest" in loaded
    assert loaded["sim-vision:latest"].context_length == 8192
    assert loaded["sim-vision:latest"].expires_at is not None
    client.generate(model="sim-vision", prompt="", keep_alive=0)
    assert "sim-vision:latest" not in {m.model for m in client.ps().models}
    shown = client.show("sim-think")
    with ollama_sim.http() as http:
        raw = http.post("/api/show", json={"name": "sim-think:latest"}).json()
    ollama.ShowResponse.model_validate(raw)
    arch = raw["model_info"]["general.architecture"]
    assert raw["model_info"][f"{arch}.context_length"] == 8192
    assert shown.capabilities == ["completion", "tools", "thinking"]
    assert client.show("sim-embed").capabilities == ["embedding"]
    assert "vision" in (client.show("sim-vision").capabilities or [])


def test_thinking(ollama_sim: Sim) -> None:
    client = ollama_sim.ollama()
    chunks = list(client.chat(model="sim-think", messages=HI, stream=True))
    kinds = ["t" if c.message.thinking else "c" for c in chunks[:-1]]
    assert kinds[0] == "t" and kinds == sorted(kinds, reverse=True)
    whole = client.chat(model="sim-think", messages=HI)
    assert whole.message.thinking and whole.eval_count == 24
    assert client.chat(model="sim-think", messages=HI, think=False).message.thinking is None
    assert client.generate(model="sim-think", prompt="hi").thinking
    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(model="sim-chat", messages=HI, think=True)
    assert caught.value.status_code == 400
    assert caught.value.error == '"sim-chat:latest" does not support thinking'
    assert client.chat(model="sim-chat", messages=HI, think=False).message.content


def test_tool_call_has_object_arguments(ollama_sim: Sim) -> None:
    client = ollama_sim.ollama()
    messages = [{"role": "user", "content": "Find cats"}]
    reply = client.chat(model="sim-chat", messages=messages, tools=[TOOL])
    assert reply.done_reason == "stop"
    calls = reply.message.tool_calls or []
    assert len(calls) == 1 and calls[0].function.name == "lookup"
    assert isinstance(calls[0].function.arguments["query"], str)
    assert calls[0].function.arguments["limit"] == 1
    chunks = list(client.chat(model="sim-chat", messages=messages, tools=[TOOL], stream=True))
    with_calls = [c for c in chunks if c.message.tool_calls]
    assert len(with_calls) == 1 and not with_calls[0].done
    assert with_calls[0].message.tool_calls[0].function.arguments == calls[0].function.arguments  # type: ignore[index]
    answered = client.chat(
        model="sim-chat",
        messages=[
            *messages,
            {"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in calls]},
            {"role": "tool", "content": "3 cats", "tool_name": "lookup"},
        ],
        tools=[TOOL],
    )
    assert not answered.message.tool_calls and answered.message.content
    commented = client.chat(
        model="sim-chat",
        messages=[
            *messages,
            {"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in calls]},
            {"role": "tool", "content": "3 cats", "tool_name": "lookup"},
            {"role": "user", "content": "(a reminder)"},
            {"role": "system", "content": "env"},
        ],
        tools=[TOOL],
    )
    assert not commented.message.tool_calls and commented.message.content
    trailing_system = client.chat(
        model="sim-chat", messages=[*messages, {"role": "system", "content": "env"}], tools=[TOOL]
    )
    assert trailing_system.message.tool_calls


def test_format_json_and_schema(ollama_sim: Sim) -> None:
    client = ollama_sim.ollama()
    plain = client.chat(model="sim-chat", messages=HI, format="json")
    assert isinstance(json.loads(plain.message.content or ""), dict)
    schema = {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]}
    streamed = list(client.chat(model="sim-chat", messages=HI, format=schema, stream=True))
    pieces = [c.message.content for c in streamed if c.message.content]
    assert len(pieces) >= 3 and json.loads("".join(pieces)) == {"n": 1.5}


def test_errors_and_probes(ollama_sim: Sim) -> None:
    client = ollama_sim.ollama()
    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(model="missing", messages=HI)
    assert caught.value.status_code == 404
    assert caught.value.error == 'model "missing" not found, try pulling it first'
    with pytest.raises(ollama.ResponseError) as images:
        client.chat(model="sim-chat", messages=[{**HI[0], "images": ["aGk="]}])
    assert images.value.status_code == 400
    seen = client.chat(model="sim-vision", messages=[{**HI[0], "images": ["aGk="]}])
    assert (seen.message.content or "").startswith("(images:1)")
    with ollama_sim.http() as http:
        assert http.get("/").text == "Ollama is running"
        assert http.head("/").status_code == 200
        assert http.get("/api/version").json()["version"]
        assert http.post("/api/show", json={"model": "missing"}).status_code == 404
        load = http.post("/api/chat", json={"model": "sim-chat", "messages": [], "stream": False})
        assert load.json()["done_reason"] == "load"
        assert http.get("/nope").text == "404 page not found"


def test_context_overflow_truncates_unless_told_not_to(ollama_sim: Sim) -> None:
    long = [{"role": "user", "content": "word " * 5000}]
    client = ollama_sim.ollama()
    reply = client.chat(model="sim-chat", messages=long)
    assert reply.prompt_eval_count == 4096 // 2 and reply.done_reason == "stop"
    with ollama_sim.http() as http:
        refused = http.post(
            "/api/chat",
            json={"model": "sim-chat", "messages": long, "truncate": False, "stream": False},
        )
    assert refused.status_code == 400 and isinstance(refused.json()["error"], str)
