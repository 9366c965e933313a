"""What a backend says about itself: alive or not, which models, which are loaded, how busy.

One function per engine, each a handful of GETs on the engine's own endpoints:

    vllm      /health (200, empty body), /v1/models (max_model_len), /metrics (running, waiting,
              KV-cache use; old and new metric names)
    llamacpp  /health (503 while loading), /v1/models, /props (per-slot n_ctx, total_slots)
    ollama    GET / (liveness), /api/tags (models), /api/ps (loaded now), /api/show (context)
    openai    /v1/models
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson


@dataclass(slots=True)
class Probe:
    healthy: bool
    error: str | None = None
    models: dict[str, int | None] = field(default_factory=dict)  # name -> context length
    # name -> the gateway's capabilities, where the engine says (Ollama's /api/show)
    capabilities: dict[str, frozenset[str]] = field(default_factory=dict)
    loaded: set[str] | None = None  # None: the engine keeps every model it serves loaded
    running: float | None = None
    waiting: float | None = None
    kv_cache: float | None = None


_METRIC = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)", re.M)


def parse_metrics(text: str, names: tuple[str, ...]) -> float | None:
    """The sum over all series of the first metric name present (data-parallel engines report
    one series per engine)."""
    for name in names:
        values = [float(m.group(3)) for m in _METRIC.finditer(text) if m.group(1) == name]
        if values:
            return sum(values)
    return None


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, bytes]:
    async with session.get(url) as resp:
        return resp.status, await resp.read()


async def _post(session: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, bytes]:
    async with session.post(url, data=orjson.dumps(body)) as resp:
        return resp.status, await resp.read()


def _openai_models(body: bytes) -> dict[str, int | None]:
    data = orjson.loads(body).get("data") or []
    out: dict[str, int | None] = {}
    for card in data:
        if isinstance(card, dict) and isinstance(card.get("id"), str):
            ctx = card.get("max_model_len")
            out[card["id"]] = ctx if isinstance(ctx, int) else None
    return out


async def probe_vllm(session: aiohttp.ClientSession, url: str) -> Probe:
    status, _ = await _get(session, f"{url}/health")
    if status != 200:
        return Probe(False, f"/health answered {status}")
    status, body = await _get(session, f"{url}/v1/models")
    models = _openai_models(body) if status == 200 else {}
    probe = Probe(True, models=models)
    status, body = await _get(session, f"{url}/metrics")
    if status == 200:
        text = body.decode(errors="replace")
        probe.running = parse_metrics(text, ("vllm:num_requests_running",))
        probe.waiting = parse_metrics(text, ("vllm:num_requests_waiting",))
        probe.kv_cache = parse_metrics(
            text, ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        )
    return probe


async def probe_llamacpp(session: aiohttp.ClientSession, url: str) -> Probe:
    status, body = await _get(session, f"{url}/health")
    if status != 200:
        return Probe(False, f"/health answered {status}: {body[:200].decode(errors='replace')}")
    status, body = await _get(session, f"{url}/v1/models")
    models = _openai_models(body) if status == 200 else {}
    status, body = await _get(session, f"{url}/props")
    if status == 200:
        props = orjson.loads(body)
        n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
        if isinstance(n_ctx, int):
            models = dict.fromkeys(models, n_ctx)
    return Probe(True, models=models)


# Ollama's capability names, as the gateway's ("completion" is what it calls chat).
_OLLAMA_CAPABILITIES = {
    "completion": "chat",
    "vision": "vision",
    "tools": "tools",
    "thinking": "thinking",
    "embedding": "embedding",
}
OllamaShown = tuple[int | None, frozenset[str] | None]


async def probe_ollama(
    session: aiohttp.ClientSession, url: str, known: dict[str, OllamaShown]
) -> Probe:
    """`known` keeps what /api/show said of each model, so it is asked once per model."""
    status, _ = await _get(session, f"{url}/")
    if status != 200:
        return Probe(False, f"GET / answered {status}")
    status, body = await _get(session, f"{url}/api/tags")
    if status != 200:
        return Probe(False, f"/api/tags answered {status}")
    names = [m.get("name") for m in orjson.loads(body).get("models") or []]
    models: dict[str, int | None] = {}
    capabilities: dict[str, frozenset[str]] = {}
    for name in names:
        if not isinstance(name, str):
            continue
        if name not in known or known[name][0] is None:
            known[name] = await _ollama_show(session, url, name)
        context, caps = known[name]
        models[name] = context
        if caps:
            capabilities[name] = caps
    status, body = await _get(session, f"{url}/api/ps")
    loaded = (
        {m["name"] for m in orjson.loads(body).get("models") or [] if isinstance(m, dict)}
        if status == 200
        else set()
    )
    return Probe(True, models=models, loaded=loaded, capabilities=capabilities)


async def _ollama_show(session: aiohttp.ClientSession, url: str, name: str) -> OllamaShown:
    """The context length and capabilities /api/show reports (None where it says nothing)."""
    status, body = await _post(session, f"{url}/api/show", {"model": name})
    if status != 200:
        return None, None
    shown = orjson.loads(body)
    info = shown.get("model_info") or {}
    arch = info.get("general.architecture")
    ctx = info.get(f"{arch}.context_length") if isinstance(arch, str) else None
    listed = shown.get("capabilities")
    caps = (
        frozenset(_OLLAMA_CAPABILITIES[c] for c in listed if c in _OLLAMA_CAPABILITIES)
        if isinstance(listed, list)
        else None
    )
    return (ctx if isinstance(ctx, int) else None), (caps or None)


async def probe_openai(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None
) -> Probe:
    base = url if re.search(r"/v\d+$", url) else f"{url}/v1"
    async with session.get(f"{base}/models", headers=headers or {}) as resp:
        body = await resp.read()
        if resp.status != 200:
            return Probe(False, f"/models answered {resp.status}")
    return Probe(True, models=_openai_models(body))
