"""Simulated inference engines: vLLM's OpenAI server, Ollama and llama.cpp's `llama-server`.

Deterministic, fast stand-ins for the real engines, used by `mindrouter demo`, by the gateway's
tests and by the benchmarks. `build_sim_app(config)` returns the ASGI app; `app.state.sim` is the
`SimState` (mutable `config`, `records`, counters). See `text.py` for how a test triggers stop
sequences, tool calls and reasoning, and `control.py` for changing faults at run time.

Module map:
    config      SimModel, SimConfig, parse_model_spec
    tokenizer   tiktoken-based prompt counting and the fixed chat template
    text        deterministic reply plans (words, reasoning, tool calls, JSON, stop strings)
    schema      values that satisfy a JSON Schema (tool arguments, structured output)
    embedding   deterministic embedding vectors, float and base64
    rerank      deterministic relevance scores: /rerank and /score (vLLM, llama.cpp)
    engine      SimState, request records, slots, fault dice, request handling
    playback    pacing a reply over HTTP: slots, TTFT, tokens/s, disconnects, dropped streams
    metrics     Prometheus text and the per-route request counter
    control     POST /sim/control, GET /sim/requests
    openai_decode, openai_chat   OpenAI-shaped requests (completions, embeddings; chat)
    openai_encode, openai_server OpenAI-shaped responses and endpoints (vLLM and llama.cpp)
    vllm        vLLM: error shapes, context rules, /tokenize, /metrics, /health, /version
    llamacpp    llama.cpp: error shapes, /props, /slots, /tokenize, /apply-template, /metrics
    llamacpp_native   llama.cpp's native POST /completion
    ollama      Ollama: /api/chat, /api/generate
    ollama_models     Ollama: /api/tags, /api/ps, /api/show, /api/embed, /api/embeddings
    ollama_wire       Ollama: NDJSON encoder, timestamps, keep_alive
    cli         `mindrouter sim` arguments and runner (also `python -m mindrouter.sim`)

Every engine also serves `POST /sim/control`, `GET /sim/requests` and, in `/metrics`,
`mindrouter_sim_requests_total{route,status}`.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route

from mindrouter.sim.config import SimConfig, SimModel, parse_model_spec
from mindrouter.sim.control import control_routes
from mindrouter.sim.engine import RequestRecord, SimState
from mindrouter.sim.llamacpp import LlamaCppServer
from mindrouter.sim.metrics import RequestCounter
from mindrouter.sim.ollama import OllamaServer
from mindrouter.sim.tokenizer import warm_up
from mindrouter.sim.vllm import VllmServer

__all__ = [
    "RequestRecord",
    "SimConfig",
    "SimModel",
    "SimState",
    "build_sim_app",
    "parse_model_spec",
]


def build_sim_app(config: SimConfig) -> Starlette:
    """The ASGI app of one simulated engine; its state is `app.state.sim`."""
    warm_up()
    state = SimState(config)
    server: VllmServer | LlamaCppServer | OllamaServer
    if config.engine == "vllm":
        server = VllmServer(state)
    elif config.engine == "llamacpp":
        server = LlamaCppServer(state)
    else:
        server = OllamaServer(state)
    routes: list[Route] = [*server.routes(), *control_routes(state)]
    paths = frozenset(route.path for route in routes)
    app = Starlette(
        routes=routes,
        middleware=[Middleware(RequestCounter, state=state, paths=paths)],
        exception_handlers={404: server.unknown_route, 405: server.unknown_route},
    )
    app.state.sim = state
    return app
