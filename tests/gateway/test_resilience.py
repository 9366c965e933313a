"""Failures of backends, seen through the gateway with the official SDKs.

Every test builds its own small cluster: simulated engines serving the same model `m`, and a
gateway in front of them. The backend that is meant to fail gets `priority: 3` (worth more than
the latency term makes of the speed differences between simulators), so the router tries it
first whenever it is usable; what the other backend's records and the audit trail show then
proves whether the gateway retried, timed out, failed over or stayed away.

- a backend on a closed port (found down by the first health round), one that hangs or whose
  host never completes a connection: every request still succeeds elsewhere, and with nothing
  else to try the client gets a gateway timeout;
- a stream that breaks after its first byte cannot be retried: each dialect reports it in-band
  (the SDKs raise) and the partial output is charged;
- a backend 4xx that retrying cannot fix reaches the client with the backend's status and
  message after one attempt;
- a request over a limit (body size, rate, budget): the statuses in each dialect are those of
  docs/failures.md.

Retries, failover, the circuit breaker and the statuses when every backend fails or none has
room are tested in process, on fake engines and an injected clock (tests/pipeline/); what the
engine adapters make of refused connections and error statuses, in tests/backends/.

The helpers here (`start_cluster`, `post`, ...) are shared by test_context_fit.py and
test_health.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
from starlette.applications import Starlette

from mindrouter.app import build_app
from mindrouter.serving import ThreadServer
from mindrouter.settings import Settings, settings_from_dict
from mindrouter.sim import SimState, build_sim_app
from mindrouter.sim.config import SimConfig, SimModel
from tests.gateway.stack import prepare_database, sqlite_url
from tests.pipeline.harness import (
    DIALECTS,
    MODEL,
    PATHS,
    USER,
    error_message,
    request_body,
)

HTTP = httpx.Client(timeout=30)

# -- a gateway over several simulated engines ----------------------------------------------------


def vllm_sim(context: int = 8192, **behaviour: Any) -> SimConfig:
    return SimConfig(engine="vllm", models=[SimModel(MODEL, context)], **behaviour)


def llamacpp_sim(context: int = 8192, **behaviour: Any) -> SimConfig:
    return SimConfig(engine="llamacpp", models=[SimModel(MODEL, context)], **behaviour)


def ollama_sim(context: int = 8192, **behaviour: Any) -> SimConfig:
    # Ollama names always carry a tag; the backend entry maps `m` to it.
    return SimConfig(engine="ollama", models=[SimModel(f"{MODEL}:latest", context)], **behaviour)


def backend(
    name: str, sim: SimConfig | None = None, url: str | None = None, **fields: Any
) -> dict[str, Any]:
    """A backend entry of the config; `sim` is started by `start_cluster`, `url` is used as is.

    It serves every model of its simulator, under the simulator's name without the `:latest`
    tag (just `m` for a backend without a simulator)."""
    engine = sim.engine if sim is not None else fields.pop("engine", "vllm")
    upstreams = [m.name for m in sim.models] if sim is not None else [MODEL]
    entry: dict[str, Any] = {
        "name": name,
        "engine": engine,
        "models": [{"name": up.removesuffix(":latest"), "upstream": up} for up in upstreams],
        **fields,
    }
    if sim is not None:
        entry["sim"] = sim
    else:
        entry["url"] = url
    return entry


@dataclass
class Cluster:
    gateway: ThreadServer
    sims: dict[str, ThreadServer]
    states: dict[str, SimState]
    settings: Settings
    key: str  # an admin key: it may call the inference routes as well as /admin
    app: Starlette
    clients: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.gateway.url

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def close(self) -> None:
        self.gateway.stop()
        for sim in self.sims.values():
            sim.stop()

    def seen(self, name: str) -> int:
        """Generation requests the named backend's engine has received."""
        return len(self.states[name].records)

    def control(self, name: str, **changes: Any) -> None:
        r = HTTP.post(self.sims[name].url + "/sim/control", json=changes)
        assert r.status_code == 200, r.text

    def backends(self) -> dict[str, dict[str, Any]]:
        r = HTTP.get(self.url + "/admin/routing/backends", headers=self.auth)
        assert r.status_code == 200, r.text
        return {b["name"]: b for b in r.json()["data"]}

    def breaker(self, name: str) -> dict[str, Any]:
        state: dict[str, Any] = self.backends()[name]["breaker"]
        return state

    def audit(self, count: int) -> list[dict[str, Any]]:
        """The newest `count` audit records, oldest first, once all of them are complete."""

        def complete() -> list[dict[str, Any]] | None:
            r = HTTP.get(self.url + "/admin/audit", params={"limit": count}, headers=self.auth)
            assert r.status_code == 200, r.text
            rows: list[dict[str, Any]] = r.json()
            if len(rows) < count or any(row["status"] == "pending" for row in rows):
                return None
            return rows[::-1]

        return wait_for(complete, "the audit records to complete")

    def period_tokens(self) -> int:
        r = HTTP.get(self.url + "/v1/usage", headers=self.auth)
        assert r.status_code == 200, r.text
        tokens: int = r.json()["period_tokens"]
        return tokens

    # SDK clients are made once per cluster: building one costs about a tenth of a second.

    def openai(self) -> openai.OpenAI:
        if "openai" not in self.clients:
            self.clients["openai"] = openai.OpenAI(
                base_url=self.url + "/v1", api_key=self.key, max_retries=0
            )
        client: openai.OpenAI = self.clients["openai"]
        return client

    def anthropic(self) -> anthropic.Anthropic:
        if "anthropic" not in self.clients:
            self.clients["anthropic"] = anthropic.Anthropic(
                base_url=self.url + "/anthropic", api_key=self.key, max_retries=0
            )
        client: anthropic.Anthropic = self.clients["anthropic"]
        return client

    def ollama(self) -> ollama.Client:
        if "ollama" not in self.clients:
            self.clients["ollama"] = ollama.Client(host=self.url, headers=self.auth)
        client: ollama.Client = self.clients["ollama"]
        return client


def start_cluster(
    backends: list[dict[str, Any]],
    models: list[dict[str, Any]] | None = None,
    database_url: str | None = None,
    **top: Any,
) -> Cluster:
    sims: dict[str, ThreadServer] = {}
    states: dict[str, SimState] = {}
    entries = []
    for b in backends:
        entry = dict(b)
        sim = entry.pop("sim", None)
        if sim is not None:
            app = build_sim_app(sim)
            sims[entry["name"]] = ThreadServer(app).start()
            states[entry["name"]] = app.state.sim
            entry["url"] = sims[entry["name"]].url
        entries.append(entry)
    raw = {
        "database_url": database_url or sqlite_url(),
        "secret_key": "test-secret",
        "log_level": "WARNING",
        "groups": [{"name": "testers"}],
        "users": [{"name": "tester", "group": "testers"}],
        "backends": entries,
        "models": models or [{"name": MODEL, "context_length": 8192}],
        **top,
    }
    settings = settings_from_dict(raw)
    try:
        key = asyncio.run(prepare_database(settings, admin=True))
        app = build_app(settings)
        gateway = ThreadServer(app).start()
    except BaseException:
        for sim in sims.values():
            sim.stop()
        raise
    return Cluster(gateway, sims, states, settings, key, app)


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout`.

    The bound only turns a hang into a failure: it is generous because the suite shares a
    loaded 2-core machine, and nothing asserts how fast the condition came."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# -- requests ------------------------------------------------------------------------------------


def post(c: Cluster, dialect: str, stream: bool = False, **extra: Any) -> httpx.Response:
    """One raw request (the whole body read), for status and body-shape checks."""
    return HTTP.post(
        c.url + PATHS[dialect], json=request_body(dialect, stream, **extra), headers=c.auth
    )


def check_error_shape(dialect: str, r: httpx.Response) -> str:
    """The error message of a failed response, after checking the dialect's body shape."""
    return error_message(dialect, r.content)


def ask_with_sdk(c: Cluster, variant: int) -> str:
    """One chat through an official SDK; variants cycle through the three SDKs, unary and
    streamed. Returns the reply text."""
    sdk, stream = DIALECTS[variant % 3], variant % 2 == 1
    if sdk == "openai":
        client = c.openai()
        if stream:
            chunks = client.chat.completions.create(
                model=MODEL, messages=USER, max_tokens=8, stream=True
            )
            return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        done = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8)
        return done.choices[0].message.content or ""
    if sdk == "anthropic":
        claude = c.anthropic()
        if stream:
            with claude.messages.stream(model=MODEL, max_tokens=8, messages=USER) as s:  # type: ignore[arg-type]
                return s.get_final_text()
        msg = claude.messages.create(model=MODEL, max_tokens=8, messages=USER)  # type: ignore[arg-type]
        return "".join(b.text for b in msg.content if b.type == "text")
    client_o = c.ollama()
    if stream:
        parts = client_o.chat(model=MODEL, messages=USER, stream=True, options={"num_predict": 8})
        return "".join(p.message.content or "" for p in parts)
    return (
        client_o.chat(model=MODEL, messages=USER, options={"num_predict": 8}).message.content or ""
    )


# -- a backend that is down ----------------------------------------------------------------------


def test_a_backend_on_a_closed_port_is_never_tried(cluster_factory: Callable[..., Cluster]) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    c = cluster_factory([backend("down", url=url, priority=3), backend("up", vllm_sim())])
    # The first health round, before the gateway takes requests, found it down.
    assert c.backends()["down"]["status"] == "UNHEALTHY"
    for i in range(12):
        assert ask_with_sdk(c, i)
    assert c.seen("up") == 12
    assert [(r["backend"], r["attempts"]) for r in c.audit(12)] == [("up", 1)] * 12


# -- a backend that hangs ------------------------------------------------------------------------

FIRST_BYTE = 0.5
TOTAL = 2.0  # longer than the first-byte bound: never the one that ends an attempt


@pytest.fixture(scope="module")
def hanging() -> Iterator[Cluster]:
    c = start_cluster(
        [backend("hung", vllm_sim(hang_rate=1.0), priority=3), backend("live", vllm_sim())],
        timeouts={"first_byte": FIRST_BYTE, "total": TOTAL},
        breaker_threshold=1000,
    )
    try:
        yield c
    finally:
        c.close()


@pytest.mark.parametrize(
    ("variant", "bound"),
    [
        (3, FIRST_BYTE),  # openai, streamed: no first byte in time
        (0, FIRST_BYTE),  # openai, unary: read from the engine stream, bounded alike
        (1, FIRST_BYTE),  # anthropic, streamed
        (5, FIRST_BYTE),  # ollama, streamed
    ],
    ids=["openai-stream", "openai-unary", "anthropic-stream", "ollama-stream"],
)
def test_a_hanging_backend_times_out_then_fails_over(
    hanging: Cluster, variant: int, bound: float
) -> None:
    c = hanging
    before = c.seen("hung")
    assert ask_with_sdk(c, variant)
    (row,) = c.audit(1)
    assert (row["status"], row["backend"], row["attempts"]) == ("ok", "live", 2)
    # The attempt on the hung backend ended by the timeout, not earlier.
    assert row["total_ms"] >= bound * 1000
    assert c.seen("hung") == before + 1
    record = c.states["hung"].records[-1]
    assert record.fault == "hang"
    # The gateway hung up on the stuck engine rather than leaving the request there.
    wait_for(lambda: record.cancelled_at is not None, "the hung engine to see the hang-up")


@contextlib.contextmanager
def unanswering(port: int) -> Iterator[None]:
    """A listener on `port` whose backlog is full, so that a new connection's handshake never
    completes: what a backend that dropped off the network looks like to the gateway."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(0)
    fillers = []
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        yield
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_a_connect_timeout_fails_over(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory(
        [backend("gone", vllm_sim(), priority=3), backend("live", vllm_sim())],
        timeouts={"connect": 0.3},
        health_interval_s=60,
        breaker_threshold=1000,
    )
    port = c.sims["gone"].port
    c.sims["gone"].stop()
    with unanswering(port):
        for dialect in DIALECTS:
            assert post(c, dialect, stream=dialect == "anthropic").status_code == 200
        rows = c.audit(3)
        assert [(r["backend"], r["attempts"]) for r in rows] == [("live", 2)] * 3
        assert "connect timeout" in c.backends()["gone"]["last_error"]
        # With the other backend out of the way, the timeout is the client's answer.
        (live,) = [b for b in c.app.state.gateway.catalog.backends if b.name == "live"]
        live.draining = True
        expected = {"openai": "timeout", "anthropic": "timeout_error", "ollama": None}
        for dialect in DIALECTS:
            r = post(c, dialect)
            assert r.status_code == 504, r.text
            assert "connect timeout" in check_error_shape(dialect, r)
            body = r.json()
            if dialect == "openai":
                assert body["error"]["code"] == expected["openai"]
            elif dialect == "anthropic":
                assert body["error"]["type"] == expected["anthropic"]


def test_a_hang_with_no_other_backend_is_a_gateway_timeout(
    cluster_factory: Callable[..., Cluster],
) -> None:
    c = cluster_factory(
        [backend("hung", vllm_sim(hang_rate=1.0))],
        timeouts={"first_byte": 0.2, "total": 0.5},
        breaker_threshold=1000,
    )
    expected = {"openai": "timeout", "anthropic": "timeout_error", "ollama": None}
    for dialect in DIALECTS:
        for stream in (False, True):
            r = post(c, dialect, stream)
            assert r.status_code == 504, (dialect, stream, r.text)
            message = check_error_shape(dialect, r)
            assert "hung" in message
            body = r.json()
            if dialect == "openai":
                assert body["error"]["code"] == expected["openai"]
            elif dialect == "anthropic":
                assert body["error"]["type"] == expected["anthropic"]


# -- a stream that breaks after its first byte ---------------------------------------------------


@pytest.fixture
def dropping(cluster_factory: Callable[..., Cluster]) -> Cluster:
    # Two dropping backends: once bytes reached the client, failover is no longer possible,
    # so even a second backend cannot save the stream.
    return cluster_factory(
        [
            backend("cut", vllm_sim(drop_after=3, default_tokens=12), priority=3),
            backend("cut-too", vllm_sim(drop_after=3, default_tokens=12)),
        ],
        breaker_threshold=1000,
    )


def _charged_after(c: Cluster, before: int) -> int:
    return wait_for(lambda: c.period_tokens() - before, "the partial usage to be charged")


def _check_cut_record(c: Cluster) -> None:
    (row,) = c.audit(1)
    assert (row["status"], row["backend"], row["attempts"]) == ("error", "cut", 1)
    assert "dropped" in row["error_message"]
    assert row["output_tokens"] and row["output_tokens"] > 0
    assert row["output"]
    assert c.seen("cut-too") == 0


def test_drop_mid_stream_openai(dropping: Cluster) -> None:
    c = dropping
    before = c.period_tokens()
    with HTTP.stream(
        "POST", c.url + PATHS["openai"], json=request_body("openai", True), headers=c.auth
    ) as r:
        assert r.status_code == 200
        payloads = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    # Some text went out, then one error object; like vLLM, the stream still ends with [DONE],
    # but no chunk ever carried a finish_reason.
    assert payloads[-1] == "[DONE]"
    *chunks, last = [json.loads(p) for p in payloads[:-1]]
    assert all(ch["choices"][0]["finish_reason"] is None for ch in chunks if ch["choices"])
    assert any(ch["choices"] and ch["choices"][0]["delta"].get("content") for ch in chunks)
    assert set(last) == {"error"}
    assert last["error"]["type"] == "server_error" and "dropped" in last["error"]["message"]
    assert _charged_after(c, before) > 0
    _check_cut_record(c)

    got: list[str] = []
    stream = c.openai().chat.completions.create(
        model=MODEL, messages=USER, max_tokens=8, stream=True
    )
    with pytest.raises(openai.APIError) as exc:
        for ch in stream:
            got.append(ch.choices[0].delta.content or "" if ch.choices else "")
    assert "".join(got)
    assert "dropped" in exc.value.message


def test_drop_mid_stream_anthropic(dropping: Cluster) -> None:
    c = dropping
    before = c.period_tokens()
    with HTTP.stream(
        "POST", c.url + PATHS["anthropic"], json=request_body("anthropic", True), headers=c.auth
    ) as r:
        assert r.status_code == 200
        lines = list(r.iter_lines())
    events = [line[7:] for line in lines if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-1] == "error"
    assert "content_block_delta" in events and "message_stop" not in events
    error = json.loads([line for line in lines if line.startswith("data: ")][-1][6:])
    assert error["type"] == "error" and error["error"]["type"] == "api_error"
    assert _charged_after(c, before) > 0
    _check_cut_record(c)

    with (
        pytest.raises(anthropic.APIStatusError) as exc,
        c.anthropic().messages.stream(model=MODEL, max_tokens=8, messages=USER) as s,  # type: ignore[arg-type]
    ):
        for _ in s.text_stream:
            pass
    assert "dropped" in str(exc.value)


def test_drop_mid_stream_ollama(dropping: Cluster) -> None:
    c = dropping
    before = c.period_tokens()
    with HTTP.stream(
        "POST", c.url + PATHS["ollama"], json=request_body("ollama", True), headers=c.auth
    ) as r:
        assert r.status_code == 200
        lines = [json.loads(line) for line in r.iter_lines()]
    assert lines[0]["message"]["content"] and lines[0]["done"] is False
    assert list(lines[-1]) == ["error"] and "dropped" in lines[-1]["error"]
    assert _charged_after(c, before) > 0
    _check_cut_record(c)

    got: list[str] = []
    with pytest.raises(ollama.ResponseError) as exc:
        for part in c.ollama().chat(model=MODEL, messages=USER, stream=True):
            got.append(part.message.content or "")
    assert "".join(got)
    assert "dropped" in exc.value.error


# -- a 4xx that retrying cannot fix --------------------------------------------------------------


@pytest.fixture(scope="module")
def no_thinking() -> Iterator[Cluster]:
    # Two Ollama engines serving a model that cannot think; asked to think, Ollama says 400.
    c = start_cluster(
        [backend("first", ollama_sim(), priority=3), backend("second", ollama_sim())],
        models=[{"name": MODEL, "capabilities": ["chat", "thinking"]}],
    )
    try:
        yield c
    finally:
        c.close()


THINK = {
    "openai": {"reasoning_effort": "high"},
    "anthropic": {"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048},
    "ollama": {"think": True},
}


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_backend_4xx_is_passed_through_after_one_attempt(
    no_thinking: Cluster, dialect: str, stream: bool
) -> None:
    c = no_thinking
    first, second = c.seen("first"), c.seen("second")
    r = post(c, dialect, stream, **THINK[dialect])
    assert r.status_code == 400, r.text
    assert check_error_shape(dialect, r) == '"m:latest" does not support thinking'
    if dialect == "anthropic":
        assert r.json()["error"]["type"] == "invalid_request_error"
    assert (c.seen("first"), c.seen("second")) == (first + 1, second)
    (row,) = c.audit(1)
    assert (row["status"], row["attempts"], row["backend"]) == ("error", 1, "first")
    # The backend answered: its breaker is not charged for the client's mistake.
    assert c.breaker("first")["consecutive_failures"] == 0


def test_backend_4xx_reaches_each_sdk_as_its_bad_request(no_thinking: Cluster) -> None:
    c = no_thinking
    with pytest.raises(openai.BadRequestError) as oe:
        c.openai().chat.completions.create(
            model=MODEL, messages=USER, max_tokens=8, reasoning_effort="high"
        )
    assert "does not support thinking" in oe.value.message
    with pytest.raises(anthropic.BadRequestError) as ae:
        c.anthropic().messages.create(
            model=MODEL,
            max_tokens=2048,
            messages=USER,  # type: ignore[arg-type]
            thinking={"type": "enabled", "budget_tokens": 1024},
        )
    assert "does not support thinking" in ae.value.message
    with pytest.raises(ollama.ResponseError) as le:
        c.ollama().chat(model=MODEL, messages=USER, think=True)
    assert le.value.status_code == 400 and "does not support thinking" in le.value.error
    assert c.seen("second") == 0


# -- nothing can serve, or the request is refused: the statuses in each dialect --------------------


def test_a_body_over_the_size_limit_is_413(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory([backend("one", vllm_sim())], max_body_bytes=20_000)
    big = [{"role": "user", "content": "x" * 30_000}]
    for dialect in DIALECTS:
        r = post(c, dialect, messages=big)
        assert r.status_code == 413, r.text
        assert "20000 bytes" in check_error_shape(dialect, r)
        if dialect == "openai":
            assert r.json()["error"]["code"] == "request_too_large"
        elif dialect == "anthropic":
            assert r.json()["error"]["type"] == "request_too_large"
    assert c.seen("one") == 0


def test_over_the_rate_limit_is_429_with_retry_after(
    cluster_factory: Callable[..., Cluster],
) -> None:
    c = cluster_factory([backend("one", vllm_sim())], groups=[{"name": "testers", "rpm": 1}])
    assert post(c, "openai").status_code == 200
    for dialect in DIALECTS:
        r = post(c, dialect)
        assert r.status_code == 429, r.text
        assert int(r.headers["retry-after"]) >= 1
        check_error_shape(dialect, r)
        if dialect == "openai":
            assert r.json()["error"]["code"] == "rate_limit_exceeded"
        elif dialect == "anthropic":
            assert r.json()["error"]["type"] == "rate_limit_error"
    assert c.seen("one") == 1


def test_an_exhausted_budget_does_not_make_sdks_sleep_until_the_period_ends(
    cluster_factory: Callable[..., Cluster],
) -> None:
    c = cluster_factory(
        [backend("one", vllm_sim())], groups=[{"name": "testers", "token_budget": 30}]
    )
    assert post(c, "openai").status_code == 200  # uses up most of the 30 tokens
    r = post(c, "anthropic")
    assert r.status_code == 429, r.text
    assert r.json()["error"]["type"] == "rate_limit_error"
    # Either the SDKs are told not to retry, or the wait they are given is a short one.
    safe = r.headers.get("x-should-retry") == "false" or int(r.headers["retry-after"]) <= 60
    assert safe, dict(r.headers)
