"""Where settings come from: secrets in files or the environment, paths relative to the
configuration file, private files, and the warning for a placeholder secret key."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from mindrouter.cli import main
from mindrouter.settings import ConfigError, load_settings
from tests.gateway.procs import GatewayProcess, cli, write_config


def config(path: Path, **values: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(values))
    return path


def test_a_relative_sqlite_path_is_the_config_files_whatever_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MINDROUTER_DATABASE_URL", raising=False)
    cfg = config(
        tmp_path / "site" / "mr.yaml",
        database_url="sqlite+aiosqlite:///./state/mr.db",
        groups=[{"name": "staff"}],
        users=[{"name": "alice", "group": "staff"}],
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["migrate", "--config", str(cfg)]) == 0
    assert (tmp_path / "site" / "state" / "mr.db").is_file()
    assert not (elsewhere / "state").exists()

    # A second command from yet another folder, with a relative --config, sees the same users.
    monkeypatch.chdir(tmp_path)
    assert main(["keys", "create", "--config", "site/mr.yaml", "--user", "alice"]) == 0
    assert not (tmp_path / "state").exists()
    assert load_settings("site/mr.yaml").database_url == (
        f"sqlite+aiosqlite:///{tmp_path / 'site' / 'state' / 'mr.db'}"
    )


def test_the_sqlite_database_and_its_folder_are_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MINDROUTER_DATABASE_URL", raising=False)
    cfg = config(tmp_path / "mr.yaml", database_url="sqlite+aiosqlite:///data/mr.db")
    assert main(["migrate", "--config", str(cfg)]) == 0
    files = [p for p in (tmp_path / "data").iterdir() if p.name.startswith("mr.db")]
    assert files, "the database was not created"
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700


def test_secrets_are_read_from_files_next_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "secret_key").write_text("s" * 40 + "\n")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "partner").write_text("sk-partner")
    cfg = config(
        tmp_path / "mr.yaml",
        secret_key_file="secret_key",
        backends=[
            {
                "name": "partner",
                "engine": "openai",
                "url": "https://api.example.org",
                "api_key_file": "keys/partner",
            }
        ],
    )
    s = load_settings(cfg)
    assert s.secret_key == "s" * 40  # the newline echo leaves is not part of it
    assert s.backends[0].api_key == "sk-partner"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"secret_key": "a" * 20, "secret_key_file": "k"},
            "secret_key and secret_key_file: give one of them",
        ),
        ({"secret_key_file": "missing"}, "secret_key_file: cannot read"),
        ({"secret_key_file": "empty"}, "secret_key_file: .* is empty"),
    ],
)
def test_secret_file_mistakes_are_named(
    tmp_path: Path, values: dict[str, object], message: str
) -> None:
    (tmp_path / "empty").write_text("")
    with pytest.raises(ConfigError, match=message):
        load_settings(config(tmp_path / "mr.yaml", **values))


def test_the_environment_wins_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINDROUTER_SECRET_KEY", "from-the-environment-0123456789")
    monkeypatch.setenv("MINDROUTER_REDIS_URL", "redis://redis.example:6379/3")
    monkeypatch.setenv("MINDROUTER_DATABASE_URL", "postgresql+asyncpg://db.example/mr")
    s = load_settings(config(tmp_path / "mr.yaml", secret_key="in-the-file-0123456789"))
    assert s.secret_key == "from-the-environment-0123456789"
    assert s.redis_url == "redis://redis.example:6379/3"
    assert s.database_url == "postgresql+asyncpg://db.example/mr"


def test_audit_retention_days_is_validated(tmp_path: Path) -> None:
    assert (
        load_settings(config(tmp_path / "a.yaml", audit_retention_days=30)).audit_retention_days
        == 30
    )
    assert load_settings(config(tmp_path / "b.yaml")).audit_retention_days == 0
    with pytest.raises(ConfigError, match="audit_retention_days"):
        load_settings(config(tmp_path / "c.yaml", audit_retention_days=-1))


@pytest.mark.parametrize(
    ("secret_key", "warned"),
    [("replace-with-a-long-random-string", True), ("k3y-" + "x" * 40, False)],
)
def test_serve_warns_about_a_placeholder_secret_key(
    tmp_path: Path, secret_key: str, warned: bool
) -> None:
    cfg = write_config(
        tmp_path / "mr.yaml",
        {"database_url": f"sqlite+aiosqlite:///{tmp_path}/mr.db", "secret_key": secret_key},
    )
    cli("migrate", "--config", str(cfg))
    gateway = GatewayProcess(cfg, tmp_path / "serve.log").start()
    try:
        gateway.wait_ready()
    finally:
        gateway.stop()
    warnings = [line for line in gateway.log().splitlines() if "secret_key is" in line]
    assert bool(warnings) is warned, gateway.log()
    if warned:
        assert json.loads(warnings[0])["level"] == "warning"
        assert "MINDROUTER_SECRET_KEY" in warnings[0]
