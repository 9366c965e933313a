"""The one Settings object: read from a YAML file (plus environment overrides) once, passed down.

Validation happens here, at load time, with messages that name the offending key, so a typo in
the config stops the gateway at start rather than surfacing as a strange request failure later.

Secrets need not be in the file: `secret_key` and each backend's `api_key` may instead be read
from a file (`secret_key_file`, `api_key_file`), and MINDROUTER_SECRET_KEY, like the database
and Redis URLs, comes from the environment. Relative paths in the file (a SQLite database, the
secret files) are taken from the file's own directory, so a command run from elsewhere finds
the same database.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import yaml

from mindrouter.backends.base import ENGINES, Engine, Timeouts
from mindrouter.bounds import INT4_MAX, INT8_MAX, MAX_EXPIRES_DAYS, text_problem
from mindrouter.routing.select import ScoreWeights
from mindrouter.settings_fields import ConfigError as ConfigError
from mindrouter.settings_fields import (
    read_int,
    read_mappings,
    read_name,
    read_secret,
    read_value,
)
from mindrouter.settings_sources import (
    DEFAULT_SECRET_KEY,
    ENVIRONMENT,
    resolve_database_url,
)

CAPABILITIES = ("chat", "vision", "embedding", "rerank", "tools", "thinking")
ReasoningField = Literal["reasoning_content", "reasoning", "both"]
ApiDocs = Literal["admin", "off"]


@dataclass(slots=True)
class GroupSettings:
    name: str
    scheduler_weight: float = 1.0
    token_budget: int = 0
    rpm: int = 0
    max_concurrent: int = 0
    budget_period_days: int = 30


@dataclass(slots=True)
class UserSettings:
    name: str
    group: str


@dataclass(slots=True)
class BackendModel:
    name: str  # the gateway's model name
    upstream: str  # the name the backend serves it under


@dataclass(slots=True)
class BackendSettings:
    name: str
    engine: Engine
    url: str
    gpu: str | None = None
    max_concurrent: int = 8
    priority: int = 0
    models: list[BackendModel] | None = None
    api_key: str | None = None
    structured_output: bool = True


@dataclass(slots=True)
class ModelSettings:
    name: str
    context_length: int = 8192
    capabilities: list[str] = field(default_factory=lambda: ["chat"])
    aliases: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Settings:
    database_url: str = "sqlite+aiosqlite:///./.mindrouter/mindrouter.db"
    redis_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    log_level: str = "INFO"
    # Key for the signatures on thinking blocks given to Anthropic clients.
    secret_key: str = DEFAULT_SECRET_KEY
    reasoning_field: ReasoningField = "reasoning_content"
    max_body_bytes: int = 32 * 1024 * 1024
    timeouts: Timeouts = field(default_factory=Timeouts)
    max_attempts: int = 3
    capacity_wait_s: float = 150.0
    redis_prefix: str = "mr:"
    redis_unavailable: Literal["fail_closed", "fail_open"] = "fail_closed"
    trusted_proxies: list[str] = field(default_factory=list)
    # Slow or hostile clients: see docs/configuration.md#connections.
    header_timeout_s: float = 15.0
    body_timeout_s: float = 30.0
    max_connections_per_client: int = 64
    auth_failures_per_minute: int = 30
    api_docs: ApiDocs = "admin"
    metrics_token: str | None = None
    metrics_port: int | None = None
    # Each process renews its heartbeat (and checkpoints its streams) every heartbeat_s; a
    # process silent for instance_stale_s is dead, and its pending audit records are swept.
    heartbeat_s: float = 3.0
    instance_stale_s: float = 15.0
    # Limit leases (a user's concurrency slot and token reservation) expire this long after
    # their last renewal; the process serving a request renews them every lease_renew_s.
    lease_s: float = 20.0
    lease_renew_s: float = 5.0
    # SIGTERM: streams in flight may finish for this long, then end with an in-band error.
    shutdown_grace_s: float = 30.0
    # Days a stored Responses-API response is kept (for previous_response_id); 0 keeps none.
    responses_retention_days: int = 30
    fairshare_sync_s: float = 0.05
    health_interval_s: float = 10.0
    breaker_threshold: int = 3
    breaker_cooldown_s: float = 30.0
    # Prompts and outputs of audit records older than this are blanked; 0 keeps them.
    audit_retention_days: int = 0
    routing_weights: ScoreWeights = field(default_factory=ScoreWeights)
    groups: list[GroupSettings] = field(default_factory=list)
    users: list[UserSettings] = field(default_factory=list)
    backends: list[BackendSettings] = field(default_factory=list)
    models: list[ModelSettings] = field(default_factory=list)


def _backend(d: dict[str, Any], where: str, base: Path | None = None) -> BackendSettings:
    name = read_name(d, where)
    engine = d.get("engine")
    if engine not in ENGINES:
        raise ConfigError(f"{where}.engine: one of {', '.join(ENGINES)} (got {engine!r})")
    url = d.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}.url: required, an http(s) URL")
    models: list[BackendModel] | None = None
    if d.get("models") is not None:
        if not isinstance(d["models"], list):
            raise ConfigError(f"{where}.models: expected a list")
        models = []
        for i, m in enumerate(d["models"]):
            if isinstance(m, str):
                models.append(BackendModel(m, m))
            elif isinstance(m, dict) and isinstance(m.get("name"), str):
                upstream = m.get("upstream", m["name"])
                models.append(BackendModel(m["name"], str(upstream)))
            else:
                raise ConfigError(f"{where}.models[{i}]: a model name or {{name, upstream}}")
            for text in (models[-1].name, models[-1].upstream):
                if (problem := text_problem(text)) is not None:
                    raise ConfigError(f"{where}.models[{i}]: {problem}")
    if (problem := text_problem(url)) is not None:
        raise ConfigError(f"{where}.url: {problem}")
    return BackendSettings(
        name=name,
        engine=engine,
        url=url.rstrip("/"),
        gpu=read_value(d, "gpu", str, where, None),
        max_concurrent=read_int(d, "max_concurrent", where, 8, (1, INT4_MAX)),
        priority=read_int(d, "priority", where, 0, (-INT4_MAX, INT4_MAX)),
        models=models,
        api_key=read_secret(d, "api_key", where, base),
        structured_output=read_value(d, "structured_output", bool, where, True),
    )


def _model(d: dict[str, Any], where: str) -> ModelSettings:
    caps = read_value(d, "capabilities", list, where, ["chat"])
    for c in caps:
        if c not in CAPABILITIES:
            raise ConfigError(f"{where}.capabilities: unknown {c!r}; use {', '.join(CAPABILITIES)}")
    aliases = read_value(d, "aliases", list, where, [])
    if not all(isinstance(a, str) and a and text_problem(a) is None for a in aliases):
        raise ConfigError(f"{where}.aliases: expected a list of non-empty strings without NUL")
    ctx = read_int(d, "context_length", where, 8192, (1, INT4_MAX))
    return ModelSettings(read_name(d, where), ctx, list(caps), list(aliases))


def _group(d: dict[str, Any], where: str) -> GroupSettings:
    g = GroupSettings(
        name=read_name(d, where),
        scheduler_weight=read_value(d, "scheduler_weight", float, where, 1.0),
        token_budget=read_int(d, "token_budget", where, 0, (0, INT8_MAX)),
        rpm=read_int(d, "rpm", where, 0, (0, INT4_MAX)),
        max_concurrent=read_int(d, "max_concurrent", where, 0, (0, INT4_MAX)),
        budget_period_days=read_int(d, "budget_period_days", where, 30, (1, MAX_EXPIRES_DAYS)),
    )
    if not 0 < g.scheduler_weight < float("inf"):
        raise ConfigError(f"{where}.scheduler_weight: must be a positive number")
    return g


def _routing_weights(d: dict[str, Any]) -> ScoreWeights:
    known = {f.name for f in fields(ScoreWeights)}
    for key in d:
        if key not in known:
            raise ConfigError(f"routing_weights.{key}: unknown; use {', '.join(sorted(known))}")
    values = {
        k: v for k in d if (v := read_value(d, k, float, "routing_weights", None)) is not None
    }
    try:
        return ScoreWeights(**values)
    except ValueError as exc:
        raise ConfigError(f"routing_weights.{exc}") from None


def _connections(raw: dict[str, Any], s: Settings) -> None:
    s.header_timeout_s = read_value(raw, "header_timeout_s", float, "", s.header_timeout_s)
    s.body_timeout_s = read_value(raw, "body_timeout_s", float, "", s.body_timeout_s)
    if s.header_timeout_s <= 0 or s.body_timeout_s <= 0:
        raise ConfigError("header_timeout_s and body_timeout_s: positive numbers of seconds")
    s.max_connections_per_client = read_int(
        raw, "max_connections_per_client", "", s.max_connections_per_client, (0, INT4_MAX)
    )
    s.auth_failures_per_minute = read_int(
        raw, "auth_failures_per_minute", "", s.auth_failures_per_minute, (0, INT4_MAX)
    )
    docs = read_value(raw, "api_docs", str, "", s.api_docs)
    if docs not in ("admin", "off"):
        raise ConfigError("api_docs: admin or off")
    s.api_docs = docs
    s.metrics_token = read_value(raw, "metrics_token", str, "", None) or None
    s.metrics_port = read_value(raw, "metrics_port", int, "", None)
    if s.metrics_port is not None and not 0 <= s.metrics_port <= 65535:
        raise ConfigError("metrics_port: a TCP port (0 picks a free one)")


def settings_from_dict(raw: dict[str, Any], base: Path | None = None) -> Settings:
    """Settings from a parsed file; `base`, the file's folder, anchors its relative paths."""
    if not isinstance(raw, dict):
        raise ConfigError("the configuration must be a mapping")
    s = Settings()
    s.database_url = resolve_database_url(
        read_value(raw, "database_url", str, "", s.database_url), base
    )
    s.redis_url = read_value(raw, "redis_url", str, "", None)
    s.host = read_value(raw, "host", str, "", s.host)
    s.port = read_value(raw, "port", int, "", s.port)
    s.log_level = read_value(raw, "log_level", str, "", s.log_level).upper()
    s.secret_key = read_secret(raw, "secret_key", "", base) or s.secret_key
    field_name = read_value(raw, "reasoning_field", str, "", s.reasoning_field)
    if field_name not in ("reasoning_content", "reasoning", "both"):
        raise ConfigError("reasoning_field: one of reasoning_content, reasoning, both")
    s.reasoning_field = field_name
    s.max_body_bytes = read_value(raw, "max_body_bytes", int, "", s.max_body_bytes)
    t = read_value(raw, "timeouts", dict, "", {})
    s.timeouts = Timeouts(
        connect=read_value(t, "connect", float, "timeouts", 10.0),
        first_byte=read_value(t, "first_byte", float, "timeouts", 60.0),
        total=read_value(t, "total", float, "timeouts", 180.0),
        idle=read_value(t, "idle", float, "timeouts", 60.0),
    )
    for key in ("connect", "first_byte", "total", "idle"):
        if getattr(s.timeouts, key) <= 0:
            raise ConfigError(f"timeouts.{key}: must be positive")
    s.max_attempts = read_value(raw, "max_attempts", int, "", s.max_attempts)
    if s.max_attempts < 1:
        raise ConfigError("max_attempts: must be at least 1")
    s.capacity_wait_s = read_value(raw, "capacity_wait_s", float, "", s.capacity_wait_s)
    s.redis_prefix = read_value(raw, "redis_prefix", str, "", s.redis_prefix)
    policy = read_value(raw, "redis_unavailable", str, "", s.redis_unavailable)
    if policy not in ("fail_closed", "fail_open"):
        raise ConfigError("redis_unavailable: fail_closed or fail_open")
    s.redis_unavailable = policy
    proxies = read_value(raw, "trusted_proxies", list, "", [])
    for i, p in enumerate(proxies):
        try:
            ipaddress.ip_network(str(p).strip(), strict=False)
        except ValueError:
            raise ConfigError(
                f"trusted_proxies[{i}]: {p!r} is not an IP address or CIDR range"
            ) from None
    s.trusted_proxies = [str(p).strip() for p in proxies]
    _connections(raw, s)
    s.heartbeat_s = read_value(raw, "heartbeat_s", float, "", s.heartbeat_s)
    s.instance_stale_s = read_value(raw, "instance_stale_s", float, "", s.instance_stale_s)
    if not 0 < s.heartbeat_s <= s.instance_stale_s / 3:
        raise ConfigError("heartbeat_s: positive and at most a third of instance_stale_s")
    if s.instance_stale_s > 120:
        raise ConfigError("instance_stale_s: at most 120 seconds")
    s.lease_s = read_value(raw, "lease_s", float, "", s.lease_s)
    s.lease_renew_s = read_value(raw, "lease_renew_s", float, "", s.lease_renew_s)
    if not 0 < s.lease_renew_s <= s.lease_s / 2:
        raise ConfigError("lease_renew_s: positive and at most half of lease_s")
    if s.lease_s > 300:
        raise ConfigError("lease_s: at most 300 seconds")
    s.shutdown_grace_s = read_value(raw, "shutdown_grace_s", float, "", s.shutdown_grace_s)
    if s.shutdown_grace_s < 0:
        raise ConfigError("shutdown_grace_s: must not be negative")
    s.responses_retention_days = read_value(
        raw, "responses_retention_days", int, "", s.responses_retention_days
    )
    if not 0 <= s.responses_retention_days <= 3650:
        raise ConfigError("responses_retention_days: between 0 and 3650")
    s.fairshare_sync_s = read_value(raw, "fairshare_sync_s", float, "", s.fairshare_sync_s)
    if not 0 < s.fairshare_sync_s <= 1:
        raise ConfigError("fairshare_sync_s: between 0 and 1 second")
    s.health_interval_s = read_value(raw, "health_interval_s", float, "", s.health_interval_s)
    s.breaker_threshold = read_value(raw, "breaker_threshold", int, "", s.breaker_threshold)
    s.breaker_cooldown_s = read_value(raw, "breaker_cooldown_s", float, "", s.breaker_cooldown_s)
    if s.health_interval_s <= 0 or s.breaker_threshold < 1 or s.breaker_cooldown_s < 0:
        raise ConfigError("health_interval_s, breaker_threshold and breaker_cooldown_s: positive")
    s.audit_retention_days = read_value(raw, "audit_retention_days", int, "", 0)
    if s.audit_retention_days < 0:
        raise ConfigError("audit_retention_days: 0 (keep everything) or a number of days")
    s.routing_weights = _routing_weights(read_value(raw, "routing_weights", dict, "", {}))
    s.groups = [_group(d, f"groups[{i}]") for i, d in enumerate(read_mappings(raw, "groups"))]
    s.users = [
        UserSettings(
            read_name(d, f"users[{i}]"), read_value(d, "group", str, f"users[{i}]", "default")
        )
        for i, d in enumerate(read_mappings(raw, "users"))
    ]
    s.backends = [
        _backend(d, f"backends[{i}]", base) for i, d in enumerate(read_mappings(raw, "backends"))
    ]
    s.models = [_model(d, f"models[{i}]") for i, d in enumerate(read_mappings(raw, "models"))]
    _check_unique("backends", [b.name for b in s.backends])
    _check_unique("models", [n for m in s.models for n in [m.name, *m.aliases]])
    _check_unique("groups", [g.name for g in s.groups])
    return s


def _check_unique(what: str, names: list[str]) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ConfigError(f"{what}: {n!r} appears more than once")
        seen.add(n)


def load_settings(path: str | Path | None) -> Settings:
    """Read the YAML file (if any), then apply the environment variables of ENVIRONMENT (their
    relative SQLite paths are the current directory's, as for any command-line value)."""
    raw: dict[str, Any] = {}
    base: Path | None = None
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            raw = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
        base = p.resolve().parent
    settings = settings_from_dict(raw, base)
    for variable, key in ENVIRONMENT.items():
        if os.environ.get(variable):
            setattr(settings, key, os.environ[variable])
    return settings
