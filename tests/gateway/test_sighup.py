"""SIGHUP on a running `mindrouter serve`: a valid change to the file is applied without a
restart; a broken file is refused with every problem logged, and the gateway keeps serving on
the configuration it had."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mindrouter.serving import ThreadServer
from mindrouter.sim import build_sim_app
from mindrouter.sim.config import SimConfig, SimModel
from tests.gateway.procs import (
    MODEL,
    GatewayProcess,
    bearer,
    cli,
    created_key,
    gateway_config,
    http,
    sim_app,
    write_config,
)

EXTRA = "extra"
DEADLINE_S = 20.0


def chat(url: str, key: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return http.post(url + "/v1/chat/completions", json=body, headers=bearer(key), timeout=30)


def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[GatewayProcess, Path, dict[str, Any], str, str]]:
    with contextlib.ExitStack() as stack:
        main = ThreadServer(sim_app()).start()
        stack.callback(main.stop)
        extra_app = build_sim_app(SimConfig(engine="vllm", models=[SimModel(EXTRA, 8192)]))
        extra = ThreadServer(extra_app).start()
        stack.callback(extra.stop)
        config = gateway_config(
            main.url,
            f"sqlite+aiosqlite:///{tmp_path}/db.sqlite",
            groups=[{"name": "testers"}],
            users=[{"name": "tester", "group": "testers"}],
            log_level="INFO",
        )
        path = write_config(tmp_path / "mindrouter.yaml", config)
        cli("migrate", "--config", str(path))
        key = created_key(cli("keys", "create", "--config", str(path), "--user", "tester"))
        proc = GatewayProcess(path, tmp_path / "gateway.log").start()
        stack.callback(proc.stop)
        proc.wait_ready()
        yield proc, path, config, key, extra.url


def hangup(proc: GatewayProcess) -> None:
    assert proc._proc is not None
    proc._proc.send_signal(signal.SIGHUP)


def test_sighup_applies_a_valid_change_and_keeps_serving_on_a_broken_one(
    served: tuple[GatewayProcess, Path, dict[str, Any], str, str],
) -> None:
    proc, path, config, key, extra_url = served
    assert chat(proc.url, key, EXTRA).status_code == 404

    config["backends"].append(
        {"name": "extra-1", "engine": "vllm", "url": extra_url, "models": [EXTRA]}
    )
    write_config(path, config)
    hangup(proc)
    until(lambda: chat(proc.url, key, EXTRA).status_code == 200, "the new backend is not used")
    until(lambda: "configuration reloaded" in proc.log(), "no reload logged")

    broken = dict(config, groups=[{"name": "testers", "tokne_budget": 5}], max_attemps=2)
    write_config(path, broken)
    hangup(proc)
    until(lambda: "still serving on the previous configuration" in proc.log(), "no refusal")
    log = proc.log()
    assert "groups[0].tokne_budget: unknown key; did you mean token_budget?" in log
    assert "max_attemps: unknown key; did you mean max_attempts?" in log
    assert chat(proc.url, key, EXTRA).status_code == 200
    assert chat(proc.url, key, MODEL).status_code == 200
