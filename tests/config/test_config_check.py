"""A configuration that refuses mistakes: each broken file gets the exact messages, all at once,
and every configuration the project ships or documents passes `mindrouter config check`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mindrouter.settings import ConfigError, load_settings, settings_from_dict

ROOT = Path(__file__).resolve().parents[2]


def backend(**overrides: Any) -> dict[str, Any]:
    return {"name": "b", "engine": "vllm", "url": "http://gpu1:8000", **overrides}


BROKEN: list[tuple[dict[str, Any], list[str]]] = [
    (
        {"groups": [{"name": "a"}, {"name": "s", "tokne_budget": 5}]},
        ["groups[1].tokne_budget: unknown key; did you mean token_budget?"],
    ),
    ({"max_attemps": 3}, ["max_attemps: unknown key; did you mean max_attempts?"]),
    (
        {"groups": [{"name": "g", "max_concurent": 2}]},
        ["groups[0].max_concurent: unknown key; did you mean max_concurrent?"],
    ),
    ({"groups": [{"name": "g", "rpm": -1}]}, ["groups[0].rpm: must be at least 0, got -1"]),
    (
        {"groups": [{"name": "g", "scheduler_weight": 0}]},
        ["groups[0].scheduler_weight: must be greater than 0, got 0"],
    ),
    (
        {"groups": [{"name": "g", "token_budget": "lots"}]},
        ["groups[0].token_budget: expected an integer, got a string"],
    ),
    (
        {"users": [{"name": "ann", "group": "staf"}]},
        ["users[0].group: no group named 'staf'; list it under groups"],
    ),
    (
        {"backends": [backend(url="gpu1:8000")]},
        ["backends[0].url: an http:// or https:// URL with a host, got 'gpu1:8000'"],
    ),
    (
        {"backends": [backend(url="ftp://gpu1")]},
        ["backends[0].url: an http:// or https:// URL with a host, got 'ftp://gpu1'"],
    ),
    (
        {"backends": [backend(engine="vlm")]},
        ["backends[0].engine: one of vllm, ollama, llamacpp, openai, got 'vlm'"],
    ),
    (
        {"backends": [{"name": "b", "engine": "vllm"}]},
        ["backends[0].url: required, the backend's http(s) URL"],
    ),
    (
        {"backends": [backend(max_concurrent=0)]},
        ["backends[0].max_concurrent: must be at least 1, got 0"],
    ),
    (
        {"backends": [backend(structured_output="no")]},
        ["backends[0].structured_output: expected a boolean (true or false), got a string"],
    ),
    (
        {"backends": [backend(models=[{"name": "m", "upstrem": "x"}])]},
        ["backends[0].models[0].upstrem: unknown key; did you mean upstream?"],
    ),
    (
        {"backends": [backend(models=[3])]},
        ["backends[0].models[0]: a model name or {name, upstream}"],
    ),
    (
        {"models": [{"name": "m", "capabilities": ["telepathy"]}]},
        [
            "models[0].capabilities: unknown 'telepathy'; "
            "use chat, vision, embedding, rerank, tools, thinking"
        ],
    ),
    ({"models": [{"name": "m"}, {"name": "m"}]}, ["models: 'm' appears more than once"]),
    (
        {"models": [{"name": "m", "context_length": 0}]},
        ["models[0].context_length: must be at least 1, got 0"],
    ),
    ({"models": [{"context_length": 10}]}, ["models[0].name: required, a non-empty string"]),
    ({"port": "eighty"}, ["port: expected an integer, got a string"]),
    ({"port": 70000}, ["port: must be at most 65535, got 70000"]),
    (
        {"redis_unavailable": "sometimes"},
        ["redis_unavailable: one of fail_closed, fail_open, got 'sometimes'"],
    ),
    (
        {"routing_weights": {"loadad": 50}},
        ["routing_weights.loadad: unknown key; did you mean loaded?"],
    ),
    ({"routing_weights": {"latency": -1}}, ["routing_weights.latency: must be at least 0, got -1"]),
    ({"routing_weights": [1, 2]}, ["routing_weights: expected a mapping, got a list"]),
    ({"timeouts": {"connect": -1}}, ["timeouts.connect: must be greater than 0, got -1"]),
    ({"lease_renew_s": 15}, ["lease_renew_s: at most half of lease_s (20), got 15"]),
    (
        {"trusted_proxies": ["10.0.0.0/33"]},
        ["trusted_proxies[0]: '10.0.0.0/33' is not an IP address or CIDR range"],
    ),
    (
        {"redis_url": "localhost:6379"},
        ["redis_url: a redis://, rediss:// or unix:// URL, got 'localhost:6379'"],
    ),
    (
        {"log_level": "loud"},
        ["log_level: one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got 'LOUD'"],
    ),
    ({"groups": {"name": "g"}}, ["groups: expected a list of mappings, got a mapping"]),
    ({"groups": ["faculty"]}, ["groups[0]: expected a mapping, got a string"]),
    ({"secret_key": 5}, ["secret_key: expected a string, got an integer"]),
    ({"shutdown_grace_s": -1}, ["shutdown_grace_s: must be at least 0, got -1"]),
    (
        # Every mistake of a file in one run, in the order of the file.
        {"max_attempts": 0, "heartbeat_s": 0, "backends": [backend(url="x", prority=1)]},
        [
            "max_attempts: must be at least 1, got 0",
            "heartbeat_s: must be greater than 0, got 0",
            "backends[0].url: an http:// or https:// URL with a host, got 'x'",
            "backends[0].prority: unknown key; did you mean priority?",
        ],
    ),
]


@pytest.mark.parametrize(("raw", "problems"), BROKEN, ids=[str(i) for i in range(len(BROKEN))])
def test_a_broken_configuration_gets_exact_messages(
    raw: dict[str, Any], problems: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_dict(raw)
    assert caught.value.problems == problems


def test_at_least_twenty_broken_configurations() -> None:
    assert len(BROKEN) >= 20


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "mr.yaml"
    cfg.write_text("groups:\n  - name: a\n    rpm: 1\n    rpm: 2\n")
    with pytest.raises(ConfigError, match="duplicate key 'rpm'"):
        load_settings(cfg)


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mindrouter.cli", *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_config_check_prints_every_problem_and_exits_non_zero(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(
        "max_attemps: 3\n"
        "groups: [{name: staff, tokne_budget: 5}]\n"
        "users: [{name: ann, group: stuff}]\n"
    )
    r = run_cli("config", "check", "--config", str(cfg), cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "mindrouter: configuration error: groups[0].tokne_budget: unknown key; "
        "did you mean token_budget?",
        "mindrouter: configuration error: users[0].group: no group named 'stuff'; "
        "list it under groups",
        "mindrouter: configuration error: max_attemps: unknown key; did you mean max_attempts?",
    ]


def test_serve_refuses_to_start_on_a_broken_file(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(f"database_url: sqlite+aiosqlite:///{tmp_path}/db.sqlite\nmax_attemps: 3\n")
    r = run_cli("serve", "--config", str(cfg), "--port", "0", cwd=tmp_path)
    assert r.returncode == 2
    assert "max_attemps: unknown key; did you mean max_attempts?" in r.stderr


def documented_configs() -> list[tuple[str, str]]:
    """Every ```yaml block of the README and docs/ that is a gateway configuration."""
    blocks = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        for i, match in enumerate(re.finditer(r"```yaml\n(.*?)```", text, re.S)):
            blocks.append((f"{page.name}#{i}", match.group(1)))
    return blocks


def test_the_docs_have_configurations_to_check() -> None:
    assert len(documented_configs()) >= 3


@pytest.mark.parametrize(
    ("name", "text"),
    [
        *documented_configs(),
        ("mindrouter.example.yaml", (ROOT / "mindrouter.example.yaml").read_text()),
    ],
    ids=lambda v: v if isinstance(v, str) and "\n" not in v else "",
)
def test_shipped_and_documented_configs_pass_config_check(
    tmp_path: Path, name: str, text: str
) -> None:
    cfg = tmp_path / "mr.yaml"
    cfg.write_text(text)
    r = run_cli("config", "check", "--config", str(cfg), cwd=tmp_path)
    assert r.returncode == 0, f"{name}: {r.stderr}"
    assert "valid" in r.stdout
