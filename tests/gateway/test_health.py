"""Health of the backends and of the gateway itself, seen through HTTP.

- A backend whose health check fails (each engine's own probe: vLLM and llama.cpp `/health`,
  Ollama `GET /`) is UNHEALTHY after the next round and gets no requests; it comes back when
  the check passes again.
- An admin drain stops new requests to a backend while the ones running there finish.
- Ollama's `loaded` models follow what `/api/ps` says, round after round.
- `/readyz` is 200 while the database answers and 503 while it does not (the database is
  reached through a TCP proxy that the test cuts); `/healthz` stays 200 throughout. Requests
  during the outage fail with 500 in every dialect.
- Redis unreachable: `fail_closed` refuses requests with 503 (529 for Anthropic clients),
  `fail_open` serves them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.gateway.databases import fresh_database
from tests.gateway.stack import prepare_database
from tests.gateway.test_resilience import (
    DIALECTS,
    HTTP,
    MODEL,
    PATHS,
    Cluster,
    backend,
    check_error_shape,
    closed_port,
    llamacpp_sim,
    ollama_sim,
    post,
    request_body,
    vllm_sim,
    wait_for,
)

SIMS = {"vllm": vllm_sim, "llamacpp": llamacpp_sim, "ollama": ollama_sim}
INTERVAL = 0.2


def _status(c: Cluster, name: str) -> str:
    status: str = c.backends()[name]["status"]
    return status


# -- health checks -------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", list(SIMS))
def test_a_backend_failing_its_health_check_gets_no_requests_until_it_recovers(
    cluster_factory: Callable[..., Cluster], engine: str
) -> None:
    sim = SIMS[engine]
    c = cluster_factory(
        [backend("sick", sim(), priority=3), backend("well", sim())],
        health_interval_s=INTERVAL,
    )
    assert post(c, "openai").status_code == 200
    assert c.seen("sick") == 1  # preferred while healthy

    c.control("sick", healthy=False)
    wait_for(lambda: _status(c, "sick") == "UNHEALTHY", "the next health round")
    assert c.backends()["sick"]["last_error"]
    for dialect in DIALECTS:
        for stream in (False, True):
            assert post(c, dialect, stream).status_code == 200
    assert c.seen("sick") == 1
    assert all(r["backend"] == "well" and r["attempts"] == 1 for r in c.audit(6))

    c.control("sick", healthy=True)
    wait_for(lambda: _status(c, "sick") == "HEALTHY", "the backend to come back")
    assert post(c, "openai").status_code == 200
    assert c.seen("sick") == 2


def _drain(c: Cluster, name: str, draining: bool) -> None:
    """What POST /admin/routing/backends/{name}/drain (or undrain) does to the routing state
    (the endpoint itself is tested in test_admin_drain_and_undrain_endpoints)."""
    (state,) = [b for b in c.app.state.gateway.catalog.backends if b.name == name]
    state.draining = draining


def test_drain_stops_new_requests_while_running_ones_finish(
    cluster_factory: Callable[..., Cluster],
) -> None:
    c = cluster_factory(
        [
            backend("old", vllm_sim(tokens_per_second=20, default_tokens=20), priority=3),
            backend("new", vllm_sim()),
        ]
    )
    body = request_body("openai", True, max_tokens=20)
    with HTTP.stream("POST", c.url + PATHS["openai"], json=body, headers=c.auth) as running:
        assert running.status_code == 200
        lines = running.iter_lines()  # kept: a dropped line iterator would close the stream
        next(lines)
        _drain(c, "old", True)
        view = c.backends()["old"]
        assert (view["status"], view["in_flight"]) == ("DRAINING", 1)
        for dialect in DIALECTS:
            assert post(c, dialect).status_code == 200
        assert c.seen("old") == 1
        rest = list(lines)
    # The stream that was running when the drain began ended normally.
    assert [line for line in rest if line][-1] == "data: [DONE]"
    assert any('"finish_reason":"' in line for line in rest)
    assert c.states["old"].records[0].cancelled_at is None
    rows = c.audit(4)
    assert (rows[0]["backend"], rows[0]["status"], rows[0]["output_tokens"]) == ("old", "ok", 20)
    assert [r["backend"] for r in rows[1:]] == ["new"] * 3
    assert c.backends()["old"]["in_flight"] == 0

    _drain(c, "old", False)
    assert c.backends()["old"]["status"] == "HEALTHY"
    assert post(c, "openai").status_code == 200
    assert c.seen("old") == 2


def test_admin_drain_and_undrain_endpoints(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory([backend("a", vllm_sim(), priority=3), backend("b", vllm_sim())])
    r = HTTP.post(c.url + "/admin/routing/backends/a/drain", headers=c.auth)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "DRAINING"
    assert post(c, "openai").status_code == 200
    assert (c.seen("a"), c.seen("b")) == (0, 1)
    plain = asyncio.run(prepare_database(c.settings))  # a second key, without admin rights
    r = HTTP.post(
        c.url + "/admin/routing/backends/a/undrain", headers={"Authorization": f"Bearer {plain}"}
    )
    assert r.status_code == 403, r.text
    r = HTTP.post(c.url + "/admin/routing/backends/nope/drain", headers=c.auth)
    assert r.status_code == 404, r.text
    r = HTTP.post(c.url + "/admin/routing/backends/a/undrain", headers=c.auth)
    assert r.status_code == 200 and r.json()["status"] == "HEALTHY", r.text


def test_ollama_loaded_models_follow_api_ps(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory([backend("olla", ollama_sim())], health_interval_s=INTERVAL)
    sim = c.sims["olla"].url

    def loaded() -> list[str]:
        models: list[str] = c.backends()["olla"]["loaded"]
        return models

    assert loaded() == []  # nothing in /api/ps yet
    # Loaded behind the gateway's back (an empty generate only loads the model)...
    r = HTTP.post(sim + "/api/generate", json={"model": "m:latest", "stream": False})
    assert r.status_code == 200 and r.json()["done_reason"] == "load"
    wait_for(lambda: loaded() == ["m"], "the next round to see the model loaded")
    # ...and unloaded the same way: the next round forgets it.
    r = HTTP.post(sim + "/api/generate", json={"model": "m:latest", "keep_alive": 0})
    assert r.status_code == 200
    wait_for(lambda: loaded() == [], "the next round to see the model unloaded")
    # A request through the gateway loads it again.
    assert post(c, "ollama").status_code == 200
    wait_for(lambda: loaded() == ["m"], "the model to be loaded again")
    ps = HTTP.get(sim + "/api/ps").json()["models"]
    assert [m["name"] for m in ps] == ["m:latest"]


# -- readiness and the database ------------------------------------------------------------------


class TcpProxy:
    """Forwards a local port to `target`. `cut()` refuses new connections and resets the open
    ones, as a database host going away would; `resume()` listens on the same port again."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.resume()

    def resume(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            # shutdown() wakes the thread blocked in accept(); close() alone would not, and the
            # port would go on accepting connections.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._open.clear()


@pytest.fixture
def proxied_database(tmp_path: Path) -> Iterator[tuple[str, TcpProxy]]:
    """A fresh PostgreSQL database, reached through a proxy: (its URL via the proxy, proxy)."""
    with fresh_database("postgresql", tmp_path) as url:
        direct = make_url(url)
        proxy = TcpProxy(direct.host or "127.0.0.1", direct.port or 5432)
        try:
            via = direct.set(host="127.0.0.1", port=proxy.port)
            yield via.render_as_string(hide_password=False), proxy
        finally:
            proxy.cut()


def test_readyz_follows_the_database(
    proxied_database: tuple[str, TcpProxy], cluster_factory: Callable[..., Cluster]
) -> None:
    # The database first: fixtures are torn down in the reverse order, so the gateway stops
    # while its database is still there. The other way round, the proxy was cut and the
    # database dropped under a running gateway, whose shutdown then waited on the audit
    # outcomes it could no longer write, outliving the test (and the run) on its thread.
    url, proxy = proxied_database
    c = cluster_factory([backend("one", vllm_sim())], database_url=url)
    r = HTTP.get(c.url + "/readyz")
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ok", "checks": {"database": "ok", "backends": "ok"}}
    assert post(c, "openai").status_code == 200

    proxy.cut()
    r = HTTP.get(c.url + "/readyz")
    assert r.status_code == 503, r.text
    assert r.json()["status"] == "unavailable"
    assert r.json()["checks"]["database"].startswith("unavailable")
    assert HTTP.get(c.url + "/healthz").status_code == 200  # alive, just not ready
    # Nothing can be audited, so nothing is served; no engine sees a request.
    seen = c.seen("one")
    for dialect in DIALECTS:
        for stream in (False, True):
            r = post(c, dialect, stream)
            assert r.status_code == 500, (dialect, stream, r.text)
            check_error_shape(dialect, r)
    assert c.seen("one") == seen

    proxy.resume()
    wait_for(lambda: HTTP.get(c.url + "/readyz").status_code == 200, "readiness to return")
    wait_for(lambda: post(c, "openai").status_code == 200, "requests to be served again")


# -- Redis ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "ready"),
    [
        ("fail_closed", 503),
        ("fail_open", 200),
    ],
)
def test_readyz_with_redis_down_follows_the_policy(
    cluster_factory: Callable[..., Cluster], policy: str, ready: int
) -> None:
    c = cluster_factory(
        [backend("one", vllm_sim())],
        redis_url=f"redis://127.0.0.1:{closed_port()}/0",
        redis_unavailable=policy,
    )
    r = HTTP.get(c.url + "/readyz")
    assert r.json()["checks"]["redis"].startswith("unavailable")
    assert r.status_code == ready, r.text


@pytest.mark.parametrize("policy", ["fail_closed", "fail_open"])
def test_requests_with_redis_down_follow_the_policy(
    cluster_factory: Callable[..., Cluster], policy: str
) -> None:
    c = cluster_factory(
        [backend("one", vllm_sim())],
        redis_url=f"redis://127.0.0.1:{closed_port()}/0",
        redis_unavailable=policy,
    )
    refused = {"openai": 503, "anthropic": 529, "ollama": 503}
    for dialect in DIALECTS:
        for stream in (False, True):
            r = post(c, dialect, stream)
            if policy == "fail_open":
                assert r.status_code == 200, r.text
                continue
            assert r.status_code == refused[dialect], r.text
            assert "rate limiting is unavailable" in check_error_shape(dialect, r)
            if dialect == "openai":
                assert r.json()["error"]["code"] == "overloaded"
            elif dialect == "anthropic":
                assert r.json()["error"]["type"] == "overloaded_error"
    assert c.seen("one") == (6 if policy == "fail_open" else 0)


def test_readyz_does_not_depend_on_the_backends(cluster_factory: Callable[..., Cluster]) -> None:
    # Every replica shares the backends: taking replicas out of the load balancer because the
    # backends are down would not help anyone.
    c = cluster_factory([backend("gone", url=f"http://127.0.0.1:{closed_port()}")])
    view = c.backends()["gone"]
    assert view["status"] == "UNHEALTHY" and "connect" in view["last_error"].lower()
    r = HTTP.get(c.url + "/readyz")
    assert r.status_code == 200, r.text
    assert r.json()["checks"] == {"database": "ok", "backends": "none healthy"}


def test_once_draining_every_answer_closes_its_connection(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """After SIGTERM a client's keep-alive connection is closed by the answer it gets, never
    while idle under a request the client has just sent."""
    c = cluster_factory([backend("one", ollama_sim())])
    with httpx.Client(base_url=c.url) as client:
        assert "close" not in client.get("/healthz").headers.get("connection", "")
        c.app.state.drain.begin()
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["status"] == "draining"
        assert ready.headers["connection"] == "close"
        answer = post(c, "openai", model=MODEL, messages=[{"role": "user", "content": "hi"}])
        assert answer.status_code == 200, answer.text
        assert answer.headers["connection"] == "close"
