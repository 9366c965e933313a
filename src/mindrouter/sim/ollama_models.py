"""Ollama's model catalogue and embedding endpoints.

`/api/tags` lists every configured model; `/api/ps` lists the models "in memory": a model is
loaded by its first request and stays listed until its keep_alive (default 5 minutes) after its
last use; `keep_alive: 0` unloads it when the request ends, a negative value keeps it forever.
Model details (family, parameter size, digest) are derived from the model name.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp

from mindrouter.sim.config import SimModel
from mindrouter.sim.embedding import embedding_vector, truncate
from mindrouter.sim.engine import (
    RequestRecord,
    SimError,
    SimState,
    handle_request,
    json_response,
    read_json_object,
)
from mindrouter.sim.metrics import Exposition, add_sim_families
from mindrouter.sim.ollama_wire import keep_alive_seconds, rfc3339
from mindrouter.sim.openai_encode import BodyEncoder
from mindrouter.sim.playback import GenerationResponse, HangResponse, Job, Timing
from mindrouter.sim.tokenizer import count_tokens

OLLAMA_VERSION = "0.12.3"
FOREVER = "2318-01-01T00:00:00Z"
PULL_FIRST = 'model "{}" not found, try pulling it first'


def family(model: SimModel) -> str:
    if model.is_embedding:
        return "bert"
    base = model.name.split(":")[0].rsplit("/", 1)[-1]
    match = re.match(r"[A-Za-z]+[0-9.]*", base)
    return match.group(0).lower().rstrip(".") if match else "llama"


def parameter_size(model: SimModel) -> str:
    match = re.search(r"(\d+(?:\.\d+)?)([bBmM])\b", model.name.partition(":")[2] or model.name)
    if match:
        return f"{match.group(1)}{match.group(2).upper()}"
    return "137M" if model.is_embedding else "8.0B"


def parameter_count(model: SimModel) -> int:
    size = parameter_size(model)
    scale = 1e9 if size.endswith("B") else 1e6
    return int(float(size[:-1]) * scale)


def details(model: SimModel) -> dict[str, Any]:
    kind = family(model)
    return {
        "parent_model": "",
        "format": "gguf",
        "family": kind,
        "families": [kind],
        "parameter_size": parameter_size(model),
        "quantization_level": "F16" if model.is_embedding else "Q4_K_M",
    }


def capabilities(model: SimModel) -> list[str]:
    if model.is_embedding:
        return ["embedding"]
    found = ["completion", "tools"]
    if model.sees_images:
        found.append("vision")
    if model.thinks:
        found.append("thinking")
    return found


class OllamaBase:
    def __init__(self, state: SimState) -> None:
        self.state = state

    def render_error(self, error: SimError) -> Response:
        return json_response({"error": error.message}, error.status)

    async def unknown_route(self, request: Request, exc: Exception) -> Response:
        return PlainTextResponse("404 page not found", 404)

    def lookup(self, body: Any, missing: str = PULL_FIRST) -> SimModel:
        """The model named by `model` (or the older `name`); a bare name means `name:latest`."""
        if not isinstance(body, dict):
            raise SimError(400, "the request body must be a JSON object")
        name = body.get("model") or body.get("name")
        if not isinstance(name, str) or not name:
            raise SimError(400, "model is required")
        model = self.state.config.find_model(name)
        if model is None and ":" not in name:
            model = self.state.config.find_model(name + ":latest")
        if model is None:
            raise SimError(404, missing.format(name), "not_found")
        return model

    def size(self, model: SimModel) -> int:
        return int(parameter_count(model) * 0.6)

    def fault(self, record: RequestRecord) -> ASGIApp | None:
        fault = self.state.roll_fault()
        if fault == "fail":
            record.fault = "fail"
            raise SimError(self.state.config.fail_status, "simulated engine failure", "server")
        return HangResponse(self.state, record) if fault == "hang" else None

    async def root(self, request: Request) -> Response:
        if not self.state.healthy:
            return PlainTextResponse("Ollama is not ready", 503)
        return PlainTextResponse("Ollama is running")

    async def version(self, request: Request) -> Response:
        return json_response({"version": OLLAMA_VERSION})

    def _entry(self, model: SimModel) -> dict[str, Any]:
        return {
            "name": model.name,
            "model": model.name,
            "size": self.size(model),
            "digest": hashlib.sha256(model.name.encode()).hexdigest(),
            "details": details(model),
        }

    async def tags(self, request: Request) -> Response:
        modified = rfc3339(self.state.started_wall)
        models = [{**self._entry(m), "modified_at": modified} for m in self.state.config.models]
        return json_response({"models": models})

    async def ps(self, request: Request) -> Response:
        models = []
        for entry in self.state.loaded_models():
            expires = FOREVER if entry.expires_at is None else rfc3339(entry.expires_at)
            item = self._entry(entry.model)
            item.update(expires_at=expires, size_vram=item["size"])
            item["context_length"] = entry.model.context_length
            models.append(item)
        return json_response({"models": models})

    async def show(self, request: Request) -> Response:
        try:
            model = self.lookup(await read_json_object(request), "model '{}' not found")
        except SimError as error:
            return self.render_error(error)
        arch = family(model)
        width = self.state.config.embedding_dim if model.is_embedding else 4096
        info = {
            "general.architecture": arch,
            "general.basename": model.name.split(":")[0],
            "general.parameter_count": parameter_count(model),
            "general.file_type": 15,
            f"{arch}.context_length": model.context_length,
            f"{arch}.embedding_length": width,
        }
        return json_response(
            {
                "license": "",
                "modelfile": f"# Modelfile generated by mindrouter sim\nFROM {model.name}\n",
                "parameters": "temperature 0.8",
                "template": "{{ .Prompt }}",
                "details": details(model),
                "model_info": info,
                "capabilities": capabilities(model),
                "modified_at": rfc3339(self.state.started_wall),
            }
        )

    async def metrics(self, request: Request) -> Response:
        out = Exposition()
        add_sim_families(out, self.state)
        return PlainTextResponse(out.text(), media_type="text/plain; version=0.0.4")

    async def embed(self, request: Request) -> ASGIApp:
        return await handle_request(
            self.state, request, "/api/embed", self._embed, self.render_error
        )

    async def embeddings(self, request: Request) -> ASGIApp:
        return await handle_request(
            self.state, request, "/api/embeddings", self._embeddings, self.render_error
        )

    def _embedding_model(self, body: Any, record: RequestRecord) -> SimModel:
        model = self.lookup(body)
        record.model = model.name
        if not model.is_embedding:
            raise SimError(400, f'"{model.name}" does not support embeddings')
        self.state.mark_loaded(model, keep_alive_seconds(body.get("keep_alive")))
        return model

    def _embed(self, body: Any, record: RequestRecord) -> ASGIApp:
        model = self._embedding_model(body, record)
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise SimError(400, "invalid input type")
        texts = [t for t in texts if t]
        dimensions = body.get("dimensions")
        if dimensions is not None and (not isinstance(dimensions, int) or dimensions < 1):
            raise SimError(400, "dimensions must be a positive integer")
        counts = [count_tokens(text) for text in texts]
        if any(c > model.context_length for c in counts) and body.get("truncate") is False:
            raise SimError(400, "input exceeds maximum context length")
        record.prompt_tokens = tokens = sum(min(c, model.context_length) for c in counts)
        if (hang := self.fault(record)) is not None:
            return hang
        dim = self.state.config.embedding_dim
        vectors = [truncate(embedding_vector(t, dim), dimensions, normalise=True) for t in texts]

        def build(timing: Timing) -> dict[str, Any]:
            total, load = max(1, int(timing.total_s * 1e9)), max(1, int(timing.queue_s * 1e9))
            return {
                "model": model.name,
                "embeddings": vectors,
                "total_duration": total,
                "load_duration": load,
                "prompt_eval_count": tokens,
            }

        return GenerationResponse(self.state, Job(record, [], BodyEncoder(build), stream=False))

    def _embeddings(self, body: Any, record: RequestRecord) -> ASGIApp:
        self._embedding_model(body, record)
        prompt = body.get("prompt") or ""
        if not isinstance(prompt, str):
            raise SimError(400, "prompt must be a string")
        record.prompt_tokens = count_tokens(prompt)
        if (hang := self.fault(record)) is not None:
            return hang
        dim = self.state.config.embedding_dim
        vector = embedding_vector(prompt, dim, normalise=False) if prompt else []
        encoder = BodyEncoder(lambda timing: {"embedding": vector})
        return GenerationResponse(self.state, Job(record, [], encoder, stream=False))
