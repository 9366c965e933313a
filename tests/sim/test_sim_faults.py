"""Fault injection, the control endpoint and health switches."""

from __future__ import annotations

import httpx
import openai
import pytest

from .support import Sim

HI = [{"role": "user", "content": "Hello there"}]


def chat_request(sim: Sim, stream: bool = False) -> tuple[str, dict[str, object]]:
    if sim.config.engine == "ollama":
        return "/api/chat", {"model": "sim-chat", "messages": HI, "stream": stream}
    return "/v1/chat/completions", {"model": "sim-chat", "messages": HI, "stream": stream}


@pytest.mark.parametrize("status", [500, 503])
def test_fail_rate_answers_the_engine_error(any_engine: Sim, status: int) -> None:
    any_engine.config.fail_rate = 1.0
    any_engine.config.fail_status = status
    path, body = chat_request(any_engine)
    with any_engine.http() as http:
        response = http.post(path, json=body)
        metrics = http.get("/metrics").text
    assert response.status_code == status
    error = response.json()["error"]
    engine = any_engine.config.engine
    if engine == "ollama":
        assert isinstance(error, str)
    elif engine == "vllm":
        assert error["code"] == status
        assert error["type"] == {500: "InternalServerError", 503: "ServiceUnavailableError"}[status]
    else:
        assert error["type"] == {500: "server_error", 503: "unavailable_error"}[status]
    assert any_engine.last_record().fault == "fail"
    assert f'mindrouter_sim_requests_total{{route="{path}",status="{status}"}}' in metrics


def test_fail_rate_with_the_sdk(vllm: Sim) -> None:
    vllm.config.fail_rate = 1.0
    with pytest.raises(openai.InternalServerError):
        vllm.openai().chat.completions.create(model="sim-chat", messages=HI)  # type: ignore[arg-type]


def test_hang_until_the_client_gives_up(any_engine: Sim) -> None:
    any_engine.config.hang_rate = 1.0
    path, body = chat_request(any_engine)
    with httpx.Client(base_url=any_engine.url) as client, pytest.raises(httpx.ReadTimeout):
        client.post(path, json=body, timeout=0.1)
    record = any_engine.last_record()
    any_engine.wait_for(lambda: record.cancelled_at is not None)
    assert record.fault == "hang" and record.status is None
    with any_engine.http() as http:
        metrics = http.get("/metrics").text
    assert f'mindrouter_sim_requests_total{{route="{path}",status="499"}}' in metrics


def test_drop_after_breaks_the_stream(any_engine: Sim) -> None:
    any_engine.config.drop_after = 3
    path, body = chat_request(any_engine, stream=True)
    received: list[str] = []
    with (
        httpx.Client(base_url=any_engine.url, timeout=5) as client,
        pytest.raises(httpx.RemoteProtocolError),
        client.stream("POST", path, json=body) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line:
                received.append(line)
    assert len(received) == 3
    assert not any("[DONE]" in line or '"done":true' in line for line in received)
    assert any_engine.last_record().fault == "drop"


def test_control_endpoint(vllm: Sim) -> None:
    with vllm.http() as http:
        changed = http.post("/sim/control", json={"fail_rate": 1, "fail_status": 429}).json()
        assert changed["fail_rate"] == 1 and changed["fail_status"] == 429
        assert (
            http.post(
                "/v1/chat/completions", json={"model": "sim-chat", "messages": HI}
            ).status_code
            == 429
        )
        http.post("/sim/control", json={"fail_rate": 0, "default_tokens": 2, "drop_after": None})
        reply = http.post("/v1/chat/completions", json={"model": "sim-chat", "messages": HI}).json()
        assert reply["usage"]["completion_tokens"] == 2
        for bad in ({"fail_rate": 2}, {"nope": 1}, {"slots": 0}, {"healthy": "yes"}, [1]):
            assert http.post("/sim/control", json=bad).status_code == 400
        assert http.get("/sim/control").json()["default_tokens"] == 2
        records = http.get("/sim/requests").json()["requests"]
    assert records[-1]["route"] == "/v1/chat/completions"
    assert records[-1]["completion_tokens"] == 2 and records[-1]["status"] == 200
    assert records[-1]["body"]["messages"] == HI


def test_unhealthy_engines_fail_their_probe(any_engine: Sim) -> None:
    engine = any_engine.config.engine
    probe = "/" if engine == "ollama" else "/health"
    with any_engine.http() as http:
        assert http.get(probe).status_code == 200
        http.post("/sim/control", json={"healthy": False})
        response = http.get(probe)
        http.post("/sim/control", json={"healthy": True})
        assert http.get(probe).status_code == 200
    assert response.status_code == 503
    if engine == "vllm":
        assert response.content == b""
    elif engine == "llamacpp":
        assert response.json()["error"]["type"] == "unavailable_error"


def test_faults_can_change_between_requests(llamacpp: Sim) -> None:
    client = llamacpp.openai()
    assert client.chat.completions.create(model="sim-chat", messages=HI)  # type: ignore[arg-type]
    llamacpp.config.fail_rate = 1.0
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="sim-chat", messages=HI)  # type: ignore[arg-type]
    llamacpp.config.fail_rate = 0.0
    stream = client.chat.completions.create(model="sim-chat", messages=HI, stream=True)  # type: ignore[arg-type]
    assert list(stream)[-1].choices[0].finish_reason == "stop"
