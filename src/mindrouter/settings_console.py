"""The web console's settings: the `console:` section and the `oidc:` section of the YAML.

console:
  enabled: true                 # serve /console (the default)
  session_hours: 12             # a sign-in lasts this long
  public_url: https://llm.example.edu   # how users reach the gateway (snippets, OIDC)
  sign_in_failures_per_minute: 10
oidc:
  issuer: https://login.example.edu/realms/campus
  client_id: mindrouter
  client_secret_file: /run/secrets/oidc   # or client_secret
  scopes: [openid, profile, email]
  username_claim: preferred_username
  groups_claim: groups
  groups: {faculty: faculty, "cs-students": students}   # claim value -> MindRouter group
  default_group: students
  admin_groups: [llm-admins]     # claim values that make a console administrator
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mindrouter.settings_fields import ConfigError, read_secret, read_value


@dataclass(slots=True)
class OidcSettings:
    issuer: str
    client_id: str
    client_secret: str | None = None
    scopes: list[str] = field(default_factory=lambda: ["openid", "profile", "email"])
    username_claim: str = "preferred_username"
    groups_claim: str = "groups"
    groups: dict[str, str] = field(default_factory=dict)
    default_group: str = "default"
    admin_groups: list[str] = field(default_factory=list)

    @property
    def discovery_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


@dataclass(slots=True)
class ConsoleSettings:
    enabled: bool = True
    session_hours: float = 12.0
    public_url: str | None = None
    sign_in_failures_per_minute: int = 10
    oidc: OidcSettings | None = None


def _strings(d: dict[str, Any], key: str, where: str, default: list[str]) -> list[str]:
    value = read_value(d, key, list, where, default)
    if not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}.{key}: expected a list of non-empty strings")
    return list(value)


def read_oidc(raw: dict[str, Any], base: Path | None) -> OidcSettings | None:
    d = read_value(raw, "oidc", dict, "", None)
    if d is None:
        return None
    known = {f for f in OidcSettings.__dataclass_fields__} | {"client_secret_file"}
    for key in d:
        if key not in known:
            raise ConfigError(f"oidc.{key}: unknown; use {', '.join(sorted(known))}")
    issuer = read_value(d, "issuer", str, "oidc", None)
    if not issuer or not issuer.startswith(("https://", "http://")):
        raise ConfigError("oidc.issuer: required, the provider's issuer URL")
    client_id = read_value(d, "client_id", str, "oidc", None)
    if not client_id:
        raise ConfigError("oidc.client_id: required")
    scopes = _strings(d, "scopes", "oidc", ["openid", "profile", "email"])
    if "openid" not in scopes:
        raise ConfigError("oidc.scopes: must include openid")
    mapping = read_value(d, "groups", dict, "oidc", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise ConfigError("oidc.groups: a mapping of claim values to MindRouter group names")
    return OidcSettings(
        issuer=issuer,
        client_id=client_id,
        client_secret=read_secret(d, "client_secret", "oidc", base),
        scopes=scopes,
        username_claim=read_value(d, "username_claim", str, "oidc", "preferred_username"),
        groups_claim=read_value(d, "groups_claim", str, "oidc", "groups"),
        groups=dict(mapping),
        default_group=read_value(d, "default_group", str, "oidc", "default"),
        admin_groups=_strings(d, "admin_groups", "oidc", []),
    )


def read_console(raw: dict[str, Any], base: Path | None) -> ConsoleSettings:
    d = read_value(raw, "console", dict, "", {})
    known = {f for f in ConsoleSettings.__dataclass_fields__} - {"oidc"}
    for key in d:
        if key not in known:
            raise ConfigError(f"console.{key}: unknown; use {', '.join(sorted(known))}")
    s = ConsoleSettings(
        enabled=read_value(d, "enabled", bool, "console", True),
        session_hours=read_value(d, "session_hours", float, "console", 12.0),
        public_url=read_value(d, "public_url", str, "console", None),
        sign_in_failures_per_minute=read_value(
            d, "sign_in_failures_per_minute", int, "console", 10
        ),
        oidc=read_oidc(raw, base),
    )
    if not 0 < s.session_hours <= 24 * 30:
        raise ConfigError("console.session_hours: between 0 and 720")
    if s.public_url is not None:
        if not s.public_url.startswith(("https://", "http://")):
            raise ConfigError("console.public_url: an http(s) URL")
        s.public_url = s.public_url.rstrip("/")
    if s.sign_in_failures_per_minute < 0:
        raise ConfigError("console.sign_in_failures_per_minute: 0 (no limit) or more")
    return s
