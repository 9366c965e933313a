"""A backend as an admin configures it: in the YAML file, through the admin API or the CLI.

The one description of a backend that the settings, the database rows, config sync, catalog
sync, the admin API and the CLI share; routing's run-time state (`catalog.BackendState`) holds
it rather than copying its values.

`api_key` and `structured_output` are the file's alone: a secret stays out of the database, so
neither is a column nor part of the admin API. A backend read from the database carries their
defaults until catalog sync takes both from the file's backend of the same name, if there is
one. `enabled` is the database's alone: the file cannot set it, and a backend it lists is
enabled when its row is made.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

Engine = Literal["vllm", "ollama", "llamacpp", "openai"]
ENGINES: tuple[Engine, ...] = ("vllm", "ollama", "llamacpp", "openai")


@dataclass(frozen=True, slots=True)
class BackendModel:
    name: str  # the gateway's model name
    upstream: str  # the name the backend serves it under


@dataclass(frozen=True, slots=True)
class BackendConfig:
    name: str
    engine: Engine
    url: str
    gpu: str | None = None
    max_concurrent: int = 8
    priority: int = 0
    enabled: bool = True
    # None: the backend serves whatever it reports; otherwise exactly these models.
    models: list[BackendModel] | None = None
    api_key: str | None = None
    structured_output: bool = True


# The fields only the file holds, and the ones the database stores (besides the name).
FILE_ONLY = ("api_key", "structured_output")
STORED = tuple(f.name for f in fields(BackendConfig) if f.name not in ("name", *FILE_ONLY))
