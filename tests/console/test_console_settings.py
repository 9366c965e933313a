"""The `console:` and `oidc:` sections, and `mindrouter users set-password`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mindrouter.settings import ConfigError, settings_from_dict


def test_defaults_and_a_full_oidc_section(tmp_path: Path) -> None:
    s = settings_from_dict({})
    assert s.console.enabled and s.console.session_hours == 12 and s.console.oidc is None
    (tmp_path / "secret").write_text("s3cret\n")
    s = settings_from_dict(
        {
            "console": {"public_url": "https://llm.example.edu/", "session_hours": 2},
            "oidc": {
                "issuer": "https://idp.example.edu/realms/x",
                "client_id": "mr",
                "client_secret_file": "secret",
                "groups": {"cs-staff": "staff"},
                "default_group": "students",
                "admin_groups": ["admins"],
            },
        },
        tmp_path,
    )
    assert s.console.public_url == "https://llm.example.edu"
    oidc = s.console.oidc
    assert oidc is not None and oidc.client_secret == "s3cret"
    assert oidc.discovery_url == "https://idp.example.edu/realms/x/.well-known/openid-configuration"
    assert oidc.scopes == ["openid", "profile", "email"] and oidc.groups == {"cs-staff": "staff"}


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"console": {"colour": "blue"}}, "console.colour: unknown"),
        ({"console": {"session_hours": 0}}, "console.session_hours"),
        ({"console": {"public_url": "llm.example.edu"}}, "console.public_url"),
        ({"oidc": {"client_id": "x"}}, "oidc.issuer: required"),
        ({"oidc": {"issuer": "https://i"}}, "oidc.client_id: required"),
        ({"oidc": {"issuer": "https://i", "client_id": "x", "scopes": ["email"]}}, "openid"),
        ({"oidc": {"issuer": "https://i", "client_id": "x", "groups": ["a"]}}, "oidc.groups"),
        ({"oidc": {"issuer": "https://i", "client_id": "x", "secret": "y"}}, "oidc.secret"),
    ],
)
def test_mistakes_name_the_key(raw: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        settings_from_dict(raw)


def _cli(*args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mindrouter.cli", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_set_password_makes_the_first_administrator(tmp_path: Path) -> None:
    from mindrouter.stores.sql import open_stores
    from tests.console.stack import run_apart

    cfg = tmp_path / "mr.yaml"
    cfg.write_text(
        f"database_url: sqlite+aiosqlite:///{tmp_path}/mr.db\n"
        "groups: [{name: staff}]\nusers: [{name: root, group: staff}]\n"
    )
    assert _cli("migrate", "--config", str(cfg), cwd=tmp_path).returncode == 0
    short = _cli(
        "users",
        "set-password",
        "root",
        "--password-stdin",
        "--config",
        str(cfg),
        cwd=tmp_path,
        stdin="short\n",
    )
    assert short.returncode == 1 and "at least 8" in short.stderr
    r = _cli(
        "users",
        "set-password",
        "root",
        "--admin",
        "--password-stdin",
        "--config",
        str(cfg),
        cwd=tmp_path,
        stdin="a long passphrase\n",
    )
    assert r.returncode == 0, r.stderr
    assert "as an administrator" in r.stdout
    missing = _cli(
        "users",
        "set-password",
        "nobody",
        "--password-stdin",
        "--config",
        str(cfg),
        cwd=tmp_path,
        stdin="a long passphrase\n",
    )
    assert missing.returncode == 1 and "nobody" in missing.stderr

    async def account() -> tuple[bool, bool]:
        stores = open_stores(f"sqlite+aiosqlite:///{tmp_path}/mr.db")
        try:
            a = await stores.accounts.by_name("root")
            assert a is not None
            return a.is_admin, a.password_hash is not None and "argon2id" in a.password_hash
        finally:
            await stores.aclose()

    assert run_apart(account()) == (True, True)
