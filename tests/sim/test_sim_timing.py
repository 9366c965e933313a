"""Slots, pacing, incremental delivery and prompt detection of client disconnects."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from .support import Sim

HI = [{"role": "user", "content": "Hello there"}]


def stream_request(sim: Sim) -> tuple[str, dict[str, object]]:
    if sim.config.engine == "ollama":
        return "/api/chat", {"model": "sim-chat", "messages": HI, "stream": True}
    return "/v1/chat/completions", {"model": "sim-chat", "messages": HI, "stream": True}


def gauge(text: str, name: str) -> float:
    """Sum of a gauge over all its series (engines with several models label each one)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


WAITING = {"vllm": "vllm:num_requests_waiting", "llamacpp": "llamacpp:requests_deferred"}
RUNNING = {"vllm": "vllm:num_requests_running", "llamacpp": "llamacpp:requests_processing"}


@pytest.mark.parametrize("engine", ["vllm", "llamacpp", "ollama"])
async def test_one_slot_makes_the_second_request_wait(sim_for, engine: str) -> None:
    sim: Sim = sim_for(engine, slots=1, tokens_per_second=100, default_tokens=20)
    path, body = stream_request(sim)
    body = {**body, "stream": False}
    async with httpx.AsyncClient(base_url=sim.url, timeout=10) as client:
        first = asyncio.create_task(client.post(path, json=body))
        while sim.state.slots.running < 1:
            await asyncio.sleep(0.002)
        second = asyncio.create_task(client.post(path, json=body))
        deadline = time.monotonic() + 3
        while sim.state.slots.waiting < 1:
            assert time.monotonic() < deadline, "the second request never queued"
            await asyncio.sleep(0.002)
        if engine in WAITING:
            metrics = (await client.get("/metrics")).text
            assert gauge(metrics, WAITING[engine]) == 1
            assert gauge(metrics, RUNNING[engine]) == 1
        if engine == "llamacpp":
            slots = (await client.get("/slots")).json()
            assert [s["is_processing"] for s in slots] == [True]
        responses = await asyncio.gather(first, second)
    assert [r.status_code for r in responses] == [200, 200]
    one, two = sorted(sim.state.records[-2:], key=lambda r: r.started_at or 0)
    assert one.finished_at is not None and two.started_at is not None
    assert two.started_at >= one.finished_at
    assert sim.state.slots.running == 0 and sim.state.slots.waiting == 0


@pytest.mark.parametrize("engine", ["vllm", "llamacpp", "ollama"])
def test_tokens_arrive_as_they_are_generated(sim_for, engine: str) -> None:
    rate, tokens = 40.0, 8
    sim: Sim = sim_for(engine, tokens_per_second=rate, default_tokens=tokens, ttft_ms=30)
    path, body = stream_request(sim)
    arrivals: list[float] = []
    with sim.http() as http, http.stream("POST", path, json=body) as response:
        for line in response.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                arrivals.append(time.monotonic())
    record = sim.last_record()
    assert len(arrivals) == tokens
    assert record.finished_at is not None and record.first_token_at is not None
    assert record.first_token_at - (record.started_at or 0) >= 0.03
    # The first token reached the client long before the server generated the last one ...
    assert arrivals[0] < record.finished_at - (tokens - 2) / rate
    # ... and the tokens came paced, not in one burst at the end.
    assert arrivals[-1] - arrivals[0] >= 0.8 * (tokens - 1) / rate


@pytest.mark.parametrize("engine", ["vllm", "llamacpp", "ollama"])
def test_client_disconnect_is_seen_within_100_ms(sim_for, engine: str) -> None:
    sim: Sim = sim_for(engine, tokens_per_second=20, default_tokens=60)
    path, body = stream_request(sim)
    with httpx.Client(base_url=sim.url, timeout=5) as client:
        with client.stream("POST", path, json=body) as response:
            for line in response.iter_lines():
                if '"content":"' in line and '"content":""' not in line:
                    # Leaving the loop closes the line iterator, which closes the connection.
                    closed_at = time.monotonic()
                    break
        record = sim.last_record()
        sim.wait_for(lambda: record.cancelled_at is not None)
    assert record.cancelled_at is not None
    assert 0 <= record.cancelled_at - closed_at < 0.1
    sim.wait_for(lambda: record.finished_at is not None)
    assert 1 <= record.completion_tokens < 60
    sim.wait_for(lambda: sim.state.slots.running == 0)
    with sim.http() as http:
        assert "mindrouter_sim_cancelled_total" in http.get("/metrics").text


def test_non_streamed_request_is_cancelled_too(sim_for) -> None:
    sim: Sim = sim_for("vllm", tokens_per_second=20, default_tokens=60)
    with httpx.Client(base_url=sim.url) as client, pytest.raises(httpx.ReadTimeout):
        client.post("/v1/chat/completions", json={"model": "sim-chat", "messages": HI}, timeout=0.1)
    record = sim.last_record()
    sim.wait_for(lambda: record.cancelled_at is not None and record.finished_at is not None)
    assert record.completion_tokens < 60 and record.fault is None


async def test_waiting_request_that_disconnects_leaves_the_queue(sim_for) -> None:
    sim: Sim = sim_for("vllm", slots=1, tokens_per_second=100, default_tokens=25)
    path, body = stream_request(sim)
    body = {**body, "stream": False}
    async with (
        httpx.AsyncClient(base_url=sim.url, timeout=10) as client,
        httpx.AsyncClient(base_url=sim.url, timeout=0.1) as impatient,
    ):
        running = asyncio.create_task(client.post(path, json=body))
        while sim.state.slots.running < 1:
            await asyncio.sleep(0.002)
        with pytest.raises(httpx.ReadTimeout):
            await impatient.post(path, json=body)
        gave_up = sim.last_record()
        sim.wait_for(lambda: gave_up.cancelled_at is not None)
        assert gave_up.started_at is None and sim.state.slots.waiting == 0
        assert (await running).status_code == 200
    assert sim.state.slots.running == 0
