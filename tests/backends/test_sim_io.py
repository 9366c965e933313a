"""The adapters against the project's simulated engines (`mindrouter.sim`): the same requests a
real vLLM, llama.cpp or Ollama server would get, end to end over HTTP."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any

import orjson
import pytest

from mindrouter.backends import EngineAdapter, build_adapter
from mindrouter.canonical import (
    ChatRequest,
    CompletionRequest,
    Done,
    EmbeddingRequest,
    Reasoning,
    ResponseFormat,
    Sampling,
    StreamEvent,
    Tool,
    assemble,
    text_message,
)
from mindrouter.errors import ContextLengthExceeded, ModelNotFound, UpstreamUnavailable
from mindrouter.serving import ThreadServer
from mindrouter.sim import SimConfig, SimModel, build_sim_app
from mindrouter.sim.engine import SimState

ENGINES = ("vllm", "llamacpp", "ollama")
CHAT = {"vllm": "chat", "llamacpp": "chat", "ollama": "chat:latest"}
THINK = {"vllm": "think", "llamacpp": "think", "ollama": "think:latest"}
EMBED = "embed-small"
WEATHER = Tool(
    "get_weather",
    "Weather now",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


class Sim:
    def __init__(self, engine: str, url: str, state: SimState) -> None:
        self.engine = engine
        self.url = url
        self.state = state


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, Sim]]:
    running: dict[str, Sim] = {}
    servers = []
    for engine in ENGINES:
        models = [
            SimModel(CHAT[engine], context_length=256),
            SimModel(THINK[engine]),
            SimModel(EMBED, kind="embedding"),
        ]
        reasoning_field = "reasoning_content" if engine == "llamacpp" else "reasoning"
        app = build_sim_app(
            SimConfig(engine=engine, models=models, reasoning_field=reasoning_field)  # type: ignore[arg-type]
        )
        server = ThreadServer(app)
        # See conftest: keep small responses from waiting on delayed ACKs.
        server._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        server.start()
        servers.append(server)
        running[engine] = Sim(engine, server.url, app.state.sim)
    yield running
    for server in servers:
        server.stop()


@pytest.fixture(params=ENGINES)
async def sim(request: Any, sims: dict[str, Sim]) -> AsyncIterator[tuple[Sim, EngineAdapter]]:
    s = sims[request.param]
    cfg = s.state.config
    cfg.fail_rate, cfg.hang_rate, cfg.drop_after, cfg.tokens_per_second = 0.0, 0.0, None, 0.0
    adapter = build_adapter(s.engine, s.url, name=s.engine)  # type: ignore[arg-type]
    try:
        yield s, adapter
    finally:
        await adapter.aclose()


def ask(engine: str, text: str = "Hello there", **kw: Any) -> ChatRequest:
    return ChatRequest(CHAT[engine], [text_message("user", text)], **kw)


async def collect(stream: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [event async for event in stream]


async def test_chat_and_stream_agree(sim: tuple[Sim, EngineAdapter]) -> None:
    s, adapter = sim
    result = await adapter.chat(ask(s.engine))
    events = await collect(adapter.chat_stream(ask(s.engine)))
    assert isinstance(events[-1], Done)
    streamed = assemble(CHAT[s.engine], events)
    assert result.first.text
    assert streamed.first.text == result.first.text
    assert streamed.usage.input_tokens == result.usage.input_tokens > 0
    assert streamed.usage.output_tokens == result.usage.output_tokens > 0
    assert not result.usage.estimated


async def test_tool_call(sim: tuple[Sim, EngineAdapter]) -> None:
    s, adapter = sim
    req = ask(s.engine, "Weather in Oslo?", tools=[WEATHER])
    for result in (
        await adapter.chat(req),
        assemble(req.model, await collect(adapter.chat_stream(req))),
    ):
        assert result.first.finish_reason == "tool_calls"
        call = result.first.tool_calls[0]
        assert call.name == "get_weather"
        assert call.id
        assert "city" in orjson.loads(call.arguments)


async def test_json_schema_output(sim: tuple[Sim, EngineAdapter]) -> None:
    s, adapter = sim
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    req = ask(s.engine, response_format=ResponseFormat("json_schema", schema, "count"))
    result = await adapter.chat(req)
    assert isinstance(orjson.loads(result.first.text)["n"], int)


async def test_reasoning(sim: tuple[Sim, EngineAdapter]) -> None:
    s, adapter = sim
    req = ChatRequest(
        THINK[s.engine], [text_message("user", "Think first")], reasoning=Reasoning("on")
    )
    result = await adapter.chat(req)
    assert result.first.reasoning
    streamed = assemble(req.model, await collect(adapter.chat_stream(req)))
    assert streamed.first.reasoning == result.first.reasoning


async def test_stop_sequence(sim: tuple[Sim, EngineAdapter]) -> None:
    s, adapter = sim
    result = await adapter.chat(ask(s.engine, "STOPTEST please", sampling=Sampling(stop=["END"])))
    assert result.first.text == "alpha beta "
    # Only vLLM says which stop string matched (`stop_reason`).
    expected = "stop_sequence" if s.engine == "vllm" else "stop"
    assert result.first.finish_reason == expected


async def test_length_limit(sim: tuple[Sim, EngineAdapter]) -> None:
    s, adapter = sim
    result = await adapter.chat(ask(s.engine, sampling=Sampling(max_tokens=2)))
    assert result.first.finish_reason == "length"
    assert result.usage.output_tokens == 2


async def test_embeddings(sim: tuple[Sim, EngineAdapter]) -> None:
    _, adapter = sim
    result = await adapter.embed(EmbeddingRequest(EMBED, ["one", "two"]))
    assert len(result.vectors) == 2
    assert len(result.vectors[0]) == 64
    assert result.usage.input_tokens > 0


async def test_completions(sim: tuple[Sim, EngineAdapter]) -> None:
    s, adapter = sim
    req = CompletionRequest(CHAT[s.engine], ["Once upon a time"], Sampling(max_tokens=4))
    result = await adapter.complete(req)
    assert result.first.text
    streamed = assemble(req.model, await collect(adapter.complete_stream(req)))
    assert streamed.first.text == result.first.text


async def test_token_count_matches_the_engine(sim: tuple[Sim, EngineAdapter]) -> None:
    s, adapter = sim
    req = ask(s.engine)
    count = await adapter.count_chat_tokens(req)
    if s.engine == "ollama":
        assert count is None
        return
    result = await adapter.chat(req)
    assert count == result.usage.input_tokens


async def test_errors(sim: tuple[Sim, EngineAdapter]) -> None:
    s, adapter = sim
    if s.engine != "llamacpp":  # llama-server answers for its one model whatever the name
        with pytest.raises(ModelNotFound):
            await adapter.chat(ChatRequest("no-such-model", [text_message("user", "x")]))
    if s.engine != "ollama":  # Ollama truncates an overlong prompt instead of refusing it
        with pytest.raises(ContextLengthExceeded):
            await adapter.chat(ask(s.engine, "word " * 400))
    s.state.config.fail_rate, s.state.config.fail_status = 1.0, 503
    with pytest.raises(UpstreamUnavailable) as caught:
        await collect(adapter.chat_stream(ask(s.engine)))
    assert caught.value.status == 503


async def test_dropped_stream(sim: tuple[Sim, EngineAdapter]) -> None:
    s, adapter = sim
    s.state.config.drop_after = 2
    with pytest.raises(UpstreamUnavailable):
        await collect(adapter.chat_stream(ask(s.engine)))


async def test_disconnect_reaches_the_engine(sim: tuple[Sim, EngineAdapter]) -> None:
    s, adapter = sim
    s.state.config.tokens_per_second = 50.0
    stream = adapter.chat_stream(ask(s.engine))
    assert isinstance(stream, AsyncGenerator)
    await anext(stream)
    closed_at = time.monotonic()
    await stream.aclose()
    record = s.state.records[-1]
    for _ in range(200):
        if record.cancelled_at is not None:
            break
        await asyncio.sleep(0.005)
    assert record.cancelled_at is not None
    assert record.cancelled_at - closed_at < 0.1
