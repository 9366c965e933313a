"""The command line contract: the shipped example config loads, `serve` refuses a database that
is not migrated and names the command that fixes it, and config mistakes are reported clearly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mindrouter.routing.select import ScoreWeights
from mindrouter.settings import load_settings, settings_from_dict

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mindrouter.cli", *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_example_config_loads() -> None:
    s = load_settings(ROOT / "mindrouter.example.yaml")
    assert {b.engine for b in s.backends} == {"vllm", "ollama"}
    assert s.groups[0].scheduler_weight == 3
    assert s.models[0].aliases == ["qwen3:8b"]


def test_serve_refuses_unmigrated_database(tmp_path: Path) -> None:
    cfg = tmp_path / "mr.yaml"
    cfg.write_text(f"database_url: sqlite+aiosqlite:///{tmp_path}/fresh.db\n")
    r = run_cli("serve", "--config", str(cfg), "--port", "0", cwd=tmp_path)
    assert r.returncode == 1
    assert "mindrouter migrate --config" in r.stderr


def test_migrate_then_keys_create_prints_key_last(tmp_path: Path) -> None:
    cfg = tmp_path / "mr.yaml"
    cfg.write_text(
        f"database_url: sqlite+aiosqlite:///{tmp_path}/db.sqlite\n"
        "groups: [{name: staff}]\nusers: [{name: ann, group: staff}]\n"
    )
    assert run_cli("migrate", "--config", str(cfg), cwd=tmp_path).returncode == 0
    r = run_cli("keys", "create", "--config", str(cfg), "--user", "ann", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("mr2_")


def test_routing_weights_and_structured_output_are_read() -> None:
    s = settings_from_dict(
        {
            "routing_weights": {"loaded": 50, "latency": 4.5},
            "backends": [
                {"name": "a", "engine": "openai", "url": "http://a", "structured_output": False},
                {"name": "b", "engine": "vllm", "url": "http://b"},
            ],
        }
    )
    assert s.routing_weights == ScoreWeights(loaded=50.0, latency=4.5)
    assert [b.structured_output for b in s.backends] == [False, True]
    assert settings_from_dict({}).routing_weights == ScoreWeights()
