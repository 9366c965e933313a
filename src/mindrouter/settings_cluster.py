"""The cluster part of the configuration: groups, users, backends and models, and their readers.

These are the desired state the gateway applies to its database at `migrate` and at start (see
`stores/sql/config_sync.py`); the readers check each entry and how the entries refer to each
other (a user's group must be listed, a name may appear once).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from mindrouter.bounds import INT4_MAX, INT8_MAX, MAX_EXPIRES_DAYS, text_problem
from mindrouter.routing.backend_config import ENGINES, BackendConfig, BackendModel
from mindrouter.settings_fields import Section

CAPABILITIES = ("chat", "vision", "embedding", "rerank", "tools", "thinking")
# The group a user without one belongs to; it exists without being listed.
DEFAULT_GROUP = "default"


@dataclass(slots=True)
class GroupSettings:
    name: str
    scheduler_weight: float = 1.0
    token_budget: int = 0
    rpm: int = 0
    max_concurrent: int = 0
    budget_period_days: int = 30
    # fnmatch patterns of the models the group may use; None: every model.
    models: list[str] | None = None


@dataclass(slots=True)
class UserSettings:
    name: str
    group: str


@dataclass(slots=True)
class ModelSettings:
    name: str
    context_length: int = 8192
    capabilities: list[str] = field(default_factory=lambda: ["chat"])
    aliases: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Cluster:
    groups: list[GroupSettings]
    users: list[UserSettings]
    backends: list[BackendConfig]
    models: list[ModelSettings]


def read_cluster(top: Section, base: Path | None) -> Cluster:
    groups = [_group(s) for s in top.sections("groups")]
    group_names = {g.name for g in groups} | {DEFAULT_GROUP}
    users = [_user(s, group_names) for s in top.sections("users")]
    backends = [_backend(s, base) for s in top.sections("backends")]
    models = [_model(s) for s in top.sections("models")]
    _unique(top, "groups", [g.name for g in groups])
    _unique(top, "users", [u.name for u in users])
    _unique(top, "backends", [b.name for b in backends])
    _unique(top, "models", [n for m in models for n in [m.name, *m.aliases]])
    return Cluster(groups, users, backends, models)


def _unique(top: Section, what: str, names: list[str]) -> None:
    seen: set[str] = set()
    for n in names:
        if n and n in seen:
            top.fail(what, f"{n!r} appears more than once")
        seen.add(n)


def _group(s: Section) -> GroupSettings:
    g = GroupSettings(
        name=s.name(),
        scheduler_weight=s.number("scheduler_weight", 1.0, above=0),
        token_budget=s.integer("token_budget", 0, (0, INT8_MAX)),
        rpm=s.integer("rpm", 0, (0, INT4_MAX)),
        max_concurrent=s.integer("max_concurrent", 0, (0, INT4_MAX)),
        budget_period_days=s.integer("budget_period_days", 30, (1, MAX_EXPIRES_DAYS)),
        models=s.strings("models", []) if s.has("models") else None,
    )
    s.finish()
    return g


def _user(s: Section, groups: set[str]) -> UserSettings:
    u = UserSettings(s.name(), s.value("group", str, DEFAULT_GROUP))
    if u.group not in groups:
        s.fail("group", f"no group named {u.group!r}; list it under groups")
    s.finish()
    return u


def _url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return f"not a URL: {url!r}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"an http:// or https:// URL with a host, got {url!r}"
    return None


def _backend(s: Section, base: Path | None) -> BackendConfig:
    name = s.name()
    engine = s.value("engine", str, None)
    if engine not in ENGINES:
        s.fail("engine", f"one of {', '.join(ENGINES)}, got {engine!r}")
        engine = "openai"
    url: str = s.value("url", str, "")
    if not s.has("url"):
        s.fail("url", "required, the backend's http(s) URL")
    elif (problem := _url_problem(url)) is not None:
        s.fail("url", problem)
    backend = BackendConfig(
        name=name,
        engine=engine,
        url=url.rstrip("/"),
        gpu=s.value("gpu", str, None),
        max_concurrent=s.integer("max_concurrent", 8, (1, INT4_MAX)),
        priority=s.integer("priority", 0, (-INT4_MAX, INT4_MAX)),
        models=_served(s),
        api_key=s.secret("api_key", base),
        structured_output=s.value("structured_output", bool, True),
    )
    s.finish()
    return backend


def _served(s: Section) -> list[BackendModel] | None:
    if not s.has("models"):
        return None
    listed = s.value("models", list, [])
    models: list[BackendModel] = []
    for i, m in enumerate(listed):
        where = f"{s.path('models')}[{i}]"
        if isinstance(m, str) and m and text_problem(m) is None:
            models.append(BackendModel(m, m))
        elif isinstance(m, dict):
            entry = Section(m, where, s.problems)
            name = entry.name()
            upstream = entry.value("upstream", str, name)
            entry.finish()
            if name:
                models.append(BackendModel(name, upstream or name))
        else:
            s.problems.append(f"{where}: a model name or {{name, upstream}}")
    return models


def _model(s: Section) -> ModelSettings:
    caps = s.strings("capabilities", ["chat"])
    for c in caps:
        if c not in CAPABILITIES:
            s.fail("capabilities", f"unknown {c!r}; use {', '.join(CAPABILITIES)}")
    model = ModelSettings(
        name=s.name(),
        context_length=s.integer("context_length", 8192, (1, INT4_MAX)),
        capabilities=[c for c in caps if c in CAPABILITIES],
        aliases=s.strings("aliases", []),
    )
    s.finish()
    return model
