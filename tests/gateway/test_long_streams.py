"""Generation is bounded by silence, not by length: a stream runs past `timeouts.total` while
tokens keep coming, and one whose engine goes quiet for `timeouts.idle` ends with the dialect's
in-band error and an `error` audit record. Scaled down: a total of 0.5 s against generations of
two seconds stands for three minutes against ten."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator

import pytest

from tests.gateway.test_resilience import (
    DIALECTS,
    HTTP,
    PATHS,
    Cluster,
    backend,
    check_error_shape,
    post,
    request_body,
    start_cluster,
    vllm_sim,
    wait_for,
)

TOKENS = 20  # at 10 tokens per second: two seconds, four times the total timeout


@pytest.fixture(scope="module")
def slow() -> Iterator[Cluster]:
    c = start_cluster(
        [backend("slow", vllm_sim(tokens_per_second=10, default_tokens=TOKENS))],
        timeouts={"total": 0.5, "idle": 1.0},
    )
    try:
        yield c
    finally:
        c.close()


def streamed_text(c: Cluster, dialect: str) -> str:
    body = request_body(dialect, True)
    body.pop("options", None)
    body.pop("max_tokens", None)
    if dialect == "anthropic":
        body["max_tokens"] = 100
    with HTTP.stream("POST", c.url + PATHS[dialect], json=body, headers=c.auth) as r:
        assert r.status_code == 200
        lines = list(r.iter_lines())
    assert not any('"error"' in line for line in lines), lines[-3:]
    return "\n".join(lines)


def test_generations_run_past_the_total_timeout_while_tokens_flow(slow: Cluster) -> None:
    c = slow
    results: dict[str, str] = {}
    errors: list[BaseException] = []

    def run(name: str, call: Callable[[], str]) -> None:
        try:
            results[name] = call()
        except BaseException as exc:
            errors.append(exc)

    calls: dict[str, Callable[[], str]] = {d: (lambda d=d: streamed_text(c, d)) for d in DIALECTS}
    calls["openai-unary"] = lambda: (
        c.openai()
        .chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])
        .choices[0]
        .message.content
        or ""
    )
    threads = [threading.Thread(target=run, args=item) for item in calls.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(results.values())
    records = c.states["slow"].records[-len(calls) :]
    assert [r.completion_tokens for r in records] == [TOKENS] * len(calls)
    assert all(r.cancelled_at is None for r in records)
    rows = c.audit(len(calls))
    assert [r["status"] for r in rows] == ["ok"] * len(calls)
    assert all(r["output_tokens"] == TOKENS for r in rows)
    # Each took longer than the total timeout, which no longer bounds generation.
    assert all(r["total_ms"] > 500 for r in rows)


@pytest.fixture(scope="module")
def silent() -> Iterator[Cluster]:
    c = start_cluster(
        [backend("quiet", vllm_sim(stall_after=3, default_tokens=TOKENS))],
        timeouts={"idle": 0.3},
    )
    try:
        yield c
    finally:
        c.close()


def last_error_event(dialect: str, lines: list[str]) -> str:
    """The message of the in-band error the stream ended with, after checking its shape."""
    if dialect == "openai":
        payloads = [line[6:] for line in lines if line.startswith("data: ")]
        assert payloads[-1] == "[DONE]"
        error = json.loads(payloads[-2])["error"]
        assert error["type"] == "server_error" and error["code"] == "timeout"
        return str(error["message"])
    if dialect == "anthropic":
        events = [line[7:] for line in lines if line.startswith("event: ")]
        assert events[-1] == "error" and "message_stop" not in events
        data = json.loads([line for line in lines if line.startswith("data: ")][-1][6:])
        assert data["error"]["type"] == "timeout_error"
        return str(data["error"]["message"])
    last = json.loads(lines[-1])
    assert list(last) == ["error"]
    return str(last["error"])


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_stream_whose_engine_goes_silent_ends_with_an_error(
    silent: Cluster, dialect: str
) -> None:
    c = silent
    before = c.seen("quiet")
    with HTTP.stream(
        "POST", c.url + PATHS[dialect], json=request_body(dialect, True), headers=c.auth
    ) as r:
        assert r.status_code == 200
        lines = list(r.iter_lines())
    assert "silent for 0.3 s" in last_error_event(dialect, lines)
    (row,) = c.audit(1)
    assert (row["status"], row["attempts"]) == ("error", 1)
    assert "silent" in row["error_message"]
    assert row["output_tokens"] and row["output_tokens"] > 0
    record = c.states["quiet"].records[before]
    assert record.fault == "stall"
    # The gateway hung up on the silent engine.
    wait_for(lambda: record.cancelled_at is not None, "the engine to see the hang-up")


def test_a_non_streamed_answer_whose_engine_goes_silent_is_a_gateway_timeout(
    silent: Cluster,
) -> None:
    r = post(silent, "openai")
    assert r.status_code == 504, r.text
    assert "silent" in check_error_shape("openai", r)
