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
from urllib.parse import urlsplit

import yaml
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from mindrouter.backends.base import Timeouts
from mindrouter.bounds import INT4_MAX, INT8_MAX, MAX_EXPIRES_DAYS
from mindrouter.routing.backend_config import BackendConfig
from mindrouter.routing.select import ScoreWeights
from mindrouter.settings_cluster import CAPABILITIES as CAPABILITIES
from mindrouter.settings_cluster import (
    GroupSettings,
    UserSettings,
    read_cluster,
)
from mindrouter.settings_cluster import (
    ModelSettings as ModelSettings,
)
from mindrouter.settings_console import ConsoleSettings, read_console
from mindrouter.settings_fields import ConfigError as ConfigError
from mindrouter.settings_fields import Section
from mindrouter.settings_sources import (
    DEFAULT_SECRET_KEY,
    ENVIRONMENT,
    resolve_database_url,
)

ReasoningField = Literal["reasoning_content", "reasoning", "both"]
ApiDocs = Literal["admin", "off"]
DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./.mindrouter/mindrouter.db"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(slots=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
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
    audit_commit: Literal["durable", "fast"] = "durable"
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
    # Where each process keeps the counts of its requests in flight for a successor on the same
    # machine (pipeline/journal.py); None: a folder in /dev/shm named for the database.
    journal_dir: str | None = None
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
    backends: list[BackendConfig] = field(default_factory=list)
    models: list[ModelSettings] = field(default_factory=list)
    # The web console and its sign-in: settings_console.py reads them.
    console: ConsoleSettings = field(default_factory=ConsoleSettings)


def _routing_weights(top: Section) -> ScoreWeights:
    s = top.section("routing_weights")
    defaults = ScoreWeights()
    values = {
        f.name: s.number(f.name, getattr(defaults, f.name), at_least=0)
        for f in fields(ScoreWeights)
    }
    s.finish()
    return ScoreWeights(**values)


def _timeouts(top: Section) -> Timeouts:
    s = top.section("timeouts")
    d = Timeouts()
    t = Timeouts(
        connect=s.number("connect", d.connect, above=0),
        first_byte=s.number("first_byte", d.first_byte, above=0),
        total=s.number("total", d.total, above=0),
        idle=s.number("idle", d.idle, above=0),
    )
    s.finish()
    return t


def _trusted_proxies(top: Section) -> list[str]:
    proxies = []
    for i, p in enumerate(top.strings("trusted_proxies", [])):
        try:
            ipaddress.ip_network(p.strip(), strict=False)
        except ValueError:
            top.problems.append(f"trusted_proxies[{i}]: {p!r} is not an IP address or CIDR range")
            continue
        proxies.append(p.strip())
    return proxies


def _redis_url(top: Section) -> str | None:
    url: str | None = top.value("redis_url", str, None)
    if url and urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        top.fail("redis_url", f"a redis://, rediss:// or unix:// URL, got {url!r}")
        return None
    return url or None


def _database_url(top: Section, base: Path | None) -> str:
    url: str = top.value("database_url", str, DEFAULT_DATABASE_URL)
    try:
        make_url(url)
    except ArgumentError:
        top.fail("database_url", f"not a database URL: {url!r}")
        return DEFAULT_DATABASE_URL
    return resolve_database_url(url, base)


def _connections(top: Section, s: Settings) -> None:
    s.header_timeout_s = top.number("header_timeout_s", s.header_timeout_s, above=0)
    s.body_timeout_s = top.number("body_timeout_s", s.body_timeout_s, above=0)
    s.max_connections_per_client = top.integer(
        "max_connections_per_client", s.max_connections_per_client, (0, INT4_MAX)
    )
    s.auth_failures_per_minute = top.integer(
        "auth_failures_per_minute", s.auth_failures_per_minute, (0, INT4_MAX)
    )
    s.api_docs = top.choice("api_docs", ("admin", "off"), s.api_docs)  # type: ignore[assignment]
    s.metrics_token = top.value("metrics_token", str, None) or None
    if top.has("metrics_port"):
        s.metrics_port = top.integer("metrics_port", 0, (0, 65535))


def _heartbeat(top: Section, s: Settings, base: Path | None) -> None:
    s.instance_stale_s = top.number("instance_stale_s", s.instance_stale_s, above=0, at_most=120)
    s.heartbeat_s = top.number("heartbeat_s", s.heartbeat_s, above=0)
    if s.heartbeat_s > s.instance_stale_s / 3:
        top.fail(
            "heartbeat_s",
            f"at most a third of instance_stale_s ({s.instance_stale_s:g}), got {s.heartbeat_s:g}",
        )
    journal = top.value("journal_dir", str, None)
    if journal:
        s.journal_dir = str(base / journal) if base is not None else journal


def _leases(top: Section, s: Settings) -> None:
    s.lease_s = top.number("lease_s", s.lease_s, above=0, at_most=300)
    s.lease_renew_s = top.number("lease_renew_s", s.lease_renew_s, above=0)
    if s.lease_renew_s > s.lease_s / 2:
        top.fail(
            "lease_renew_s", f"at most half of lease_s ({s.lease_s:g}), got {s.lease_renew_s:g}"
        )


def settings_from_dict(raw: Any, base: Path | None = None) -> Settings:
    """Settings from a parsed file; `base`, the file's folder, anchors its relative paths.
    Raises ConfigError listing every problem of the file."""
    if not isinstance(raw, dict):
        raise ConfigError("the configuration must be a mapping of keys to values")
    problems: list[str] = []
    top = Section(raw, "", problems)
    s = Settings()
    s.database_url = _database_url(top, base)
    s.redis_url = _redis_url(top)
    s.host = top.value("host", str, s.host)
    s.port = top.integer("port", s.port, (0, 65535))
    s.log_level = top.value("log_level", str, s.log_level).upper()
    if s.log_level not in LOG_LEVELS:
        top.fail("log_level", f"one of {', '.join(LOG_LEVELS)}, got {s.log_level!r}")
        s.log_level = "INFO"
    s.secret_key = top.secret("secret_key", base) or s.secret_key
    s.reasoning_field = top.choice(  # type: ignore[assignment]
        "reasoning_field", ("reasoning_content", "reasoning", "both"), s.reasoning_field
    )
    s.max_body_bytes = top.integer("max_body_bytes", s.max_body_bytes, (1, INT8_MAX))
    s.timeouts = _timeouts(top)
    s.max_attempts = top.integer("max_attempts", s.max_attempts, (1, 100))
    s.capacity_wait_s = top.number("capacity_wait_s", s.capacity_wait_s, at_least=0)
    s.redis_prefix = top.value("redis_prefix", str, s.redis_prefix)
    s.audit_commit = top.choice(  # type: ignore[assignment]
        "audit_commit", ("durable", "fast"), s.audit_commit
    )
    s.redis_unavailable = top.choice(  # type: ignore[assignment]
        "redis_unavailable", ("fail_closed", "fail_open"), s.redis_unavailable
    )
    s.trusted_proxies = _trusted_proxies(top)
    _connections(top, s)
    _heartbeat(top, s, base)
    _leases(top, s)
    s.shutdown_grace_s = top.number("shutdown_grace_s", s.shutdown_grace_s, at_least=0)
    s.responses_retention_days = top.integer(
        "responses_retention_days", s.responses_retention_days, (0, 3650)
    )
    s.fairshare_sync_s = top.number("fairshare_sync_s", s.fairshare_sync_s, above=0, at_most=1)
    s.health_interval_s = top.number("health_interval_s", s.health_interval_s, above=0)
    s.breaker_threshold = top.integer("breaker_threshold", s.breaker_threshold, (1, INT4_MAX))
    s.breaker_cooldown_s = top.number("breaker_cooldown_s", s.breaker_cooldown_s, at_least=0)
    s.audit_retention_days = top.integer("audit_retention_days", 0, (0, MAX_EXPIRES_DAYS))
    s.routing_weights = _routing_weights(top)
    cluster = read_cluster(top, base)
    s.groups, s.users, s.backends, s.models = (
        cluster.groups,
        cluster.users,
        cluster.backends,
        cluster.models,
    )
    s.console = read_console(top, base)
    top.finish()
    if problems:
        raise ConfigError(*problems)
    return s


class _StrictLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys in a mapping; a file saying `rpm` twice is a
    mistake, so it is refused."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> Any:
    try:
        return yaml.load(path.read_text(), Loader=_StrictLoader) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc


def load_settings(path: str | Path | None) -> Settings:
    """Read the YAML file (if any), then apply the environment variables of ENVIRONMENT (their
    relative SQLite paths are the current directory's, as for any command-line value)."""
    raw: Any = {}
    base: Path | None = None
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        raw = read_yaml(p)
        base = p.resolve().parent
    settings = settings_from_dict(raw, base)
    for variable, key in ENVIRONMENT.items():
        if os.environ.get(variable):
            setattr(settings, key, os.environ[variable])
    return settings
