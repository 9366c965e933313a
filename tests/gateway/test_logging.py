"""Every log line of a request carries its request id, as structured JSON."""

from __future__ import annotations

import json

import httpx
import pytest
import structlog

from mindrouter.app import build_app
from mindrouter.observability.logging import configure_logging
from mindrouter.serving import InLoopServer
from mindrouter.settings import settings_from_dict
from mindrouter.sim import build_sim_app
from tests.gateway.stack import gateway_config, prepare_database, sim_config, sqlite_url


async def test_request_id_in_json_logs(capsys: pytest.CaptureFixture[str]) -> None:
    sims = {e: InLoopServer(build_sim_app(sim_config(e))) for e in ("vllm", "ollama", "llamacpp")}
    for s in sims.values():
        await s.start()
    settings = settings_from_dict(
        gateway_config({e: s.url for e, s in sims.items()}, database_url=sqlite_url())
    )
    key = await prepare_database(settings)
    configure_logging("INFO")  # after capsys took stderr, so the lines land in the capture
    gw = InLoopServer(build_app(settings))
    await gw.start()
    try:
        async with httpx.AsyncClient(base_url=gw.url) as client:
            r = await client.post(
                "/v1/chat/completions",
                json={"model": "chat-vllm", "messages": [{"role": "user", "content": "hi"}]},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert r.status_code == 200
    finally:
        await gw.stop()
        for s in sims.values():
            await s.stop()
        structlog.reset_defaults()
    rid = r.json()["id"]
    assert r.headers["x-request-id"] == rid
    lines = [
        json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")
    ]
    mine = [line for line in lines if line.get("request_id") == rid]
    assert mine, lines
    done = [line for line in mine if line["event"] == "request finished"]
    assert done and done[0]["backend"] == "vllm-1" and done[0]["output_tokens"] > 0


def test_a_value_json_cannot_hold_still_gives_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Lines are written by orjson; what it refuses (an integer wider than 64 bits, keys that
    are not strings) is written by the standard encoder instead of failing the caller, and an
    object of no JSON type is written as its text."""
    configure_logging("INFO")
    try:
        log = structlog.get_logger("test")
        log.info("plain", tokens=12, nothing=None)
        log.info("wide", tokens=2**70, by_choice={0: "a"})
        log.info("opaque", thing=object())
    finally:
        structlog.reset_defaults()
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [line["event"] for line in lines] == ["plain", "wide", "opaque"]
    assert lines[0]["tokens"] == 12 and lines[0]["nothing"] is None
    assert lines[1]["tokens"] == 2**70 and lines[1]["by_choice"] == {"0": "a"}
    assert lines[2]["thing"].startswith("<object object at")
