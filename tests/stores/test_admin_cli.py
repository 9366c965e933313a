"""The admin commands, run in-process with argv, against a fresh database of each engine."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from mindrouter.admin_cli import add_admin_commands
from mindrouter.identity.authenticate import Authenticator
from mindrouter.stores.sql import open_stores

from .conftest import ENGINES, FAST_HASHER, create_database, drop_database, run_in_thread, unique


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="mindrouter")
    add_admin_commands(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args(argv)
    code = ns.run(ns)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(params=ENGINES)
def config(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    url = run_in_thread(create_database(request.param, tmp_path))
    path = tmp_path / "mindrouter.yaml"
    path.write_text(
        f"database_url: '{url}'\n"
        "groups: [{name: staff, rpm: 60}]\n"
        "users: [{name: alice, group: staff}]\n"
    )
    try:
        yield str(path)
    finally:
        run_in_thread(drop_database(url))


async def _authenticate(url: str, key: str) -> str:
    stores = open_stores(url, hasher=FAST_HASHER)
    try:
        principal = await Authenticator(stores.keys).authenticate({"x-api-key": key})
        return principal.user_name
    finally:
        await stores.aclose()


def test_keys_lifecycle_from_the_command_line(
    config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["keys", "list", "--config", config], capsys)
    assert code == 1 and f"run `mindrouter migrate --config {config}`" in err

    code, out, _ = run(["migrate", "--config", config], capsys)
    assert code == 0 and "revision" in out

    argv = [
        "keys",
        "create",
        "--config",
        config,
        "--user",
        "alice",
        "--admin",
        "--expires-days",
        "3",
    ]
    code, out, _ = run(argv, capsys)
    key = out.strip().splitlines()[-1]
    assert code == 0 and key.startswith("mr2_") and len(key) >= 47
    url = config_url(config)
    assert run_in_thread(_authenticate(url, key)) == "alice"

    code, out, _ = run(["keys", "list", "--config", config, "--user", "alice"], capsys)
    assert code == 0 and key[:12] in out and key not in out

    code, out, _ = run(["keys", "revoke", "--config", config, key[:12]], capsys)
    assert code == 0 and "revoked" in out
    second = run(["keys", "create", "--config", config, "--user", "alice"], capsys)[1]
    second_key = second.strip().splitlines()[-1]
    assert run(["keys", "revoke", "--config", config, second_key], capsys)[0] == 0

    code, _, err = run(["keys", "create", "--config", config, "--user", "nobody"], capsys)
    assert code == 1 and "no user named 'nobody'" in err


def config_url(config: str) -> str:
    from mindrouter.settings import load_settings

    return load_settings(config).database_url


def test_users_groups_and_backends_from_the_command_line(
    config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["migrate", "--config", config], capsys)[0] == 0
    c = ["--config", config]
    group, user, backend = unique("lab"), unique("bob"), unique("gpu")

    assert run(["groups", "create", *c, group, "--weight", "2", "--rpm", "10"], capsys)[0] == 0
    assert run(["groups", "update", *c, group, "--token-budget", "500"], capsys)[0] == 0
    out = run(["groups", "list", *c], capsys)[1]
    assert group in out and "token_budget=500" in out and "rpm=10" in out

    assert run(["users", "create", *c, user, "--group", group, "--rpm", "3"], capsys)[0] == 0
    assert (
        run(["users", "update", *c, user, "--rpm", "inherit", "--max-concurrent", "2"], capsys)[0]
        == 0
    )
    out = run(["users", "list", *c, "--group", group], capsys)[1]
    assert user in out and "max_concurrent=2" in out and "rpm=" not in out
    assert run(["users", "deactivate", *c, user], capsys)[0] == 0
    assert f"{user}  {group}  no" in run(["users", "list", *c], capsys)[1]

    argv = [
        "backends",
        "create",
        *c,
        backend,
        "--engine",
        "vllm",
        "--url",
        "http://h:8000",
        "--model",
        "llama=meta/llama",
    ]
    assert run(argv, capsys)[0] == 0
    assert run(["backends", "update", *c, backend, "--disable", "--priority", "5"], capsys)[0] == 0
    out = run(["backends", "list", *c], capsys)[1]
    assert backend in out and "llama" in out and " no " in out
    assert run(["backends", "delete", *c, backend], capsys)[0] == 0
    code, _, err = run(["backends", "delete", *c, backend], capsys)
    assert code == 1 and "no backend named" in err


def test_the_environment_overrides_the_config_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("database_url: 'sqlite+aiosqlite:////nonexistent/dir/x.db'\n")
    monkeypatch.setenv("MINDROUTER_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path}/env.db")
    assert run(["migrate", "--config", str(config)], capsys)[0] == 0
    assert (tmp_path / "env.db").exists()


def test_a_bad_config_is_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["groups", "list", "--config", str(tmp_path / "missing.yaml")], capsys)
    assert code == 2 and "config file not found" in err
