"""Model listings for Ollama clients: /api/tags, /api/ps, /api/show and /api/version (§3.6).

The gateway serves models from many backends, so it describes each one from what it knows (a
`ModelView` built by the caller) rather than from a GGUF file. Clients rely on a few details:
timestamps must be ISO-8601 (the SDK parses them as datetimes); `show` must carry `model_info`
(the SDK requires the key), and tools read the context length from it by way of
`general.architecture`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from mindrouter.dialects.ollama.fields import as_object, invalid, opt_bool, opt_str

# The gateway's model configuration says "chat"; Ollama calls the same capability "completion".
_CAPABILITY_NAMES = {"chat": "completion"}
# Stands in for the architecture in `model_info` keys when the family is not known.
_UNKNOWN_ARCH = "unknown"


@dataclass(slots=True, kw_only=True)
class ModelView:
    """What the gateway tells Ollama clients about one model.

    `capabilities` uses Ollama's names: completion, tools, vision, embedding, thinking.
    Timestamps are ISO-8601 strings (see `format_rfc3339`); `expires_at` is when a loaded model
    will be unloaded, None when unknown or never.
    """

    name: str
    context_length: int
    modified_at: str
    capabilities: list[str] = field(default_factory=lambda: ["completion"])
    family: str = ""
    parameter_size: str = ""
    quantization_level: str = ""
    parameter_count: int | None = None
    size: int = 0
    size_vram: int | None = None
    digest: str = ""
    expires_at: str | None = None
    loaded: bool = False


def _digest(model: ModelView) -> str:
    # Clients use the digest to tell models apart; one derived from the name is stable and unique.
    return model.digest or hashlib.sha256(model.name.encode()).hexdigest()


def _capabilities(model: ModelView) -> list[str]:
    names = (_CAPABILITY_NAMES.get(c, c) for c in model.capabilities)
    return list(dict.fromkeys(names))


def _details(model: ModelView) -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "gguf",
        "family": model.family,
        "families": [model.family] if model.family else [],
        "parameter_size": model.parameter_size,
        "quantization_level": model.quantization_level,
    }


def _listing(model: ModelView) -> dict[str, Any]:
    return {
        "name": model.name,
        "model": model.name,
        "modified_at": model.modified_at,
        "size": model.size,
        "digest": _digest(model),
        "details": _details(model),
    }


def encode_tags(models: list[ModelView]) -> dict[str, Any]:
    """/api/tags: every model the caller may use."""
    return {
        "models": [{**_listing(m), "capabilities": _capabilities(m)} for m in models],
    }


def encode_ps(models: list[ModelView]) -> dict[str, Any]:
    """/api/ps: only the models loaded on some backend right now."""
    entries = []
    for m in models:
        if not m.loaded:
            continue
        entry = _listing(m)
        del entry["modified_at"]
        if m.expires_at is not None:
            entry["expires_at"] = m.expires_at
        entry["size_vram"] = m.size if m.size_vram is None else m.size_vram
        entry["context_length"] = m.context_length
        entries.append(entry)
    return {"models": entries}


def decode_show_request(body: object) -> str:
    """The model a /api/show body asks about; older clients send `name` instead of `model`."""
    obj = as_object(body, "")
    opt_bool(obj, "verbose", "")
    for key in ("model", "name"):
        name = opt_str(obj, key, "")
        if name and name.strip():
            return name
    raise invalid("model", "is required")


def encode_show(model: ModelView) -> dict[str, Any]:
    """/api/show: the model's details, its metadata (`model_info`) and capabilities."""
    arch = model.family or _UNKNOWN_ARCH
    info: dict[str, Any] = {
        "general.architecture": arch,
        f"{arch}.context_length": model.context_length,
    }
    if model.parameter_count is not None:
        info["general.parameter_count"] = model.parameter_count
    capabilities = _capabilities(model)
    return {
        "modelfile": f"# Served through MindRouter\nFROM {model.name}\n",
        "parameters": f"num_ctx {model.context_length}",
        "template": _template(capabilities),
        "details": _details(model),
        "model_info": info,
        "capabilities": capabilities,
        "modified_at": model.modified_at,
    }


def _template(capabilities: list[str]) -> str:
    # The real chat template lives on the backend. Some older clients decide whether a model can
    # call tools by looking for `.Tools` in the template, so the placeholder says as much.
    if "tools" in capabilities:
        return "{{ if .Tools }}{{ .Tools }}{{ end }}{{ .Prompt }}"
    return "{{ .Prompt }}"


def encode_version(version: str) -> dict[str, Any]:
    return {"version": version}
