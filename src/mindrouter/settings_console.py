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

from mindrouter.settings_fields import Section


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


def read_oidc(top: Section, base: Path | None) -> OidcSettings | None:
    if not top.has("oidc"):
        top.section("oidc")
        return None
    d = top.section("oidc")
    issuer = d.value("issuer", str, "")
    if not issuer.startswith(("https://", "http://")):
        d.fail("issuer", "required, the provider's issuer URL")
    client_id = d.value("client_id", str, "")
    if not client_id:
        d.fail("client_id", "required")
    scopes = d.strings("scopes", ["openid", "profile", "email"])
    if "openid" not in scopes:
        d.fail("scopes", "must include openid")
    mapping = d.value("groups", dict, {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        d.fail("groups", "a mapping of claim values to MindRouter group names")
        mapping = {}
    oidc = OidcSettings(
        issuer=issuer,
        client_id=client_id,
        client_secret=d.secret("client_secret", base),
        scopes=scopes,
        username_claim=d.value("username_claim", str, "preferred_username"),
        groups_claim=d.value("groups_claim", str, "groups"),
        groups=dict(mapping),
        default_group=d.value("default_group", str, "default"),
        admin_groups=d.strings("admin_groups", []),
    )
    d.finish()
    return oidc


def read_console(top: Section, base: Path | None) -> ConsoleSettings:
    d = top.section("console")
    s = ConsoleSettings(
        enabled=d.value("enabled", bool, True),
        session_hours=d.number("session_hours", 12.0, above=0, at_most=24 * 30),
        public_url=d.value("public_url", str, None),
        sign_in_failures_per_minute=d.integer("sign_in_failures_per_minute", 10, (0, 10**6)),
        oidc=read_oidc(top, base),
    )
    if s.public_url is not None:
        if not s.public_url.startswith(("https://", "http://")):
            d.fail("public_url", "an http(s) URL")
        s.public_url = s.public_url.rstrip("/")
    d.finish()
    return s
