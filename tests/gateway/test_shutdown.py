"""SIGTERM on a real `mindrouter serve` process: a graceful drain.

- 20 streams in flight when SIGTERM arrives all finish whole; the process exits 0 and every
  audit record is completed (`ok`).
- With a grace period shorter than the streams, the open streams end with the dialect's in-band
  error event instead of being cut, their records are completed, and the exit status is 0.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import httpx

from mindrouter.serving import ThreadServer
from mindrouter.stores.audit_records import AuditFilter
from tests.gateway.databases import fresh_database, stores_at
from tests.gateway.procs import (
    GatewayProcess,
    bearer,
    chat_body,
    cli,
    created_key,
    gateway_config,
    sim_app,
    write_config,
)
from tests.stores.conftest import run_in_thread

STREAMS = 20


def _stream(url: str, key: str, max_tokens: int, out: list[dict[str, Any]]) -> None:
    lines: list[str] = []
    body = chat_body("openai", stream=True, max_tokens=max_tokens)
    try:
        with httpx.stream(
            "POST", url + "/v1/chat/completions", json=body, headers=bearer(key), timeout=60
        ) as response:
            for line in response.iter_lines():
                if line:
                    lines.append(line)
            out.append({"status": response.status_code, "lines": lines})
    except httpx.HTTPError as exc:
        out.append({"status": None, "lines": lines, "error": repr(exc)})


def _records(url: str) -> list[Any]:
    async def read() -> list[Any]:
        async with stores_at(url) as stores:
            return await stores.audit_log.query(AuditFilter(limit=1000))

    return run_in_thread(read())


def _drain(tmp: Path, *, grace: float, max_tokens: int) -> tuple[int, list[dict[str, Any]], Any]:
    engine = sim_app(slots=STREAMS, tokens_per_second=20, default_tokens=100_000)
    sim = ThreadServer(engine).start()
    try:
        with fresh_database("sqlite", tmp, migrated=False) as url:
            settings = gateway_config(
                sim.url,
                url,
                groups=[{"name": "g"}],
                users=[{"name": "u", "group": "g"}],
                shutdown_grace_s=grace,
            )
            settings["backends"][0]["max_concurrent"] = STREAMS
            config = write_config(tmp / "mindrouter.yaml", settings)
            cli("migrate", "--config", str(config))
            key = created_key(cli("keys", "create", "--config", str(config), "--user", "u"))
            proc = GatewayProcess(config, tmp / "gateway.log").start()
            try:
                proc.wait_ready()
                results: list[dict[str, Any]] = []
                threads = [
                    threading.Thread(target=_stream, args=(proc.url, key, max_tokens, results))
                    for _ in range(STREAMS)
                ]
                for t in threads:
                    t.start()
                state = engine.state.sim
                deadline = 600  # bounded: 60 s of 0.1 s polls
                while len([r for r in state.records if r.first_token_at]) < STREAMS and deadline:
                    threading.Event().wait(0.1)
                    deadline -= 1
                assert deadline, "the streams did not all start"
                running = proc._proc
                assert running is not None
                running.send_signal(signal.SIGTERM)
                code = running.wait(grace + 30)
                for t in threads:
                    t.join(30)
                return code, results, _records(url)
            finally:
                proc.stop()
    finally:
        sim.stop()


def _text(lines: list[str]) -> str:
    out = []
    for line in lines:
        if line.startswith("data: {"):
            delta = (json.loads(line[6:]).get("choices") or [{}])[0].get("delta") or {}
            out.append(delta.get("content") or "")
    return "".join(out)


def test_sigterm_lets_twenty_streams_finish_and_exits_0(tmp_path: Path) -> None:
    code, results, records = _drain(tmp_path, grace=30, max_tokens=60)
    assert code == 0
    assert len(results) == STREAMS
    for r in results:
        assert r["status"] == 200, r
        assert r["lines"][-1] == "data: [DONE]", r["lines"][-3:]
        assert not any('"error"' in line for line in r["lines"])
        assert _text(r["lines"])
    assert len(records) == STREAMS
    assert {r.status for r in records} == {"ok"}
    assert all(r.output_tokens and r.completed_at for r in records)


def test_streams_past_the_grace_period_end_with_an_in_band_error(tmp_path: Path) -> None:
    code, results, records = _drain(tmp_path, grace=1, max_tokens=2000)
    assert code == 0
    assert len(results) == STREAMS
    for r in results:
        assert r["status"] == 200, r
        errors = [line for line in r["lines"] if line.startswith('data: {"error"')]
        assert len(errors) == 1, r["lines"][-3:]
        assert "shutting down" in errors[0]
        assert r["lines"][-1] == "data: [DONE]"
    assert len(records) == STREAMS
    assert {r.status for r in records} == {"error"}
    # What was generated before the end is charged.
    assert all(r.output_tokens and r.completed_at for r in records)
