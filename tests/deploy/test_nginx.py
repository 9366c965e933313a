"""The documented nginx example in front of real gateways with simulated backends: a request
queued longer than nginx's default read timeout (60 s) and a 5-minute stream both get through.

Durations are scaled by MINDROUTER_PROXY_TEST_SCALE (default 0.1: the "60 s" is 6 s, the
"5-minute" stream 30 s): the example's read timeout, the gateways' timeouts and the request
durations are all multiplied by it, so their proportions are the real ones. With 1 the test runs
the real durations and the example's own timeout untouched (about six minutes):

    MINDROUTER_PROXY_TEST_SCALE=1 .venv/bin/pytest tests/deploy/test_nginx.py

Which setting matters is shown by a control run beside the example: nginx with its default read
timeout in front of a gateway with the default timeouts. There the queued request gets nginx's
own 504: nothing comes back while a request waits for a backend slot, and nginx's default gives
up after 60 s of silence. The long stream gets through both: nginx's read timeout and the
gateway's `timeouts.idle` bound the silence between two reads, never a stream's length, so only
the wait before the first byte needs the example's longer timeout.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import yaml
from bench.ports import free_ports

from mindrouter.app import build_app
from mindrouter.serving import ThreadServer
from mindrouter.settings import Settings, settings_from_dict
from mindrouter.sim import build_sim_app
from mindrouter.sim.config import SimConfig, SimModel
from tests.gateway.stack import prepare_database

from .files import DEPLOY, ROOT
from .nginx import (
    NGINX_DEFAULT_READ_TIMEOUT_S,
    Ports,
    example_read_timeout_s,
    running_nginx,
    self_signed_certificate,
    site_config,
)

SCALE = float(os.environ.get("MINDROUTER_PROXY_TEST_SCALE", "0.1"))
QUEUED_S = 70 * SCALE  # longer than nginx's default read timeout
STREAM_S = 300 * SCALE  # the 5-minute stream
TOKENS_PER_SECOND = 20.0
CONTEXT = 1_000_000
SHIPPED_CONFIG = DEPLOY / "compose" / "mindrouter.yaml"
pytestmark = pytest.mark.timeout(max(120, int(3 * STREAM_S) + 60))

# Enough for the longest request here; the simulator plans a reply's words up front.
DEFAULT_TOKENS = round(max(QUEUED_S, STREAM_S) * TOKENS_PER_SECOND) + 100


def shipped_waits() -> dict[str, Any]:
    """The timeouts of the configuration shipped beside the example (compose's gateways)."""
    raw = yaml.safe_load(SHIPPED_CONFIG.read_text())
    return {"capacity_wait_s": raw["capacity_wait_s"], "timeouts": raw["timeouts"]}


def default_waits() -> dict[str, Any]:
    s = Settings()
    t = s.timeouts
    return {
        "capacity_wait_s": s.capacity_wait_s,
        "timeouts": {
            "connect": t.connect,
            "first_byte": t.first_byte,
            "idle": t.idle,
            "total": t.total,
        },
    }


def scaled(waits: dict[str, Any]) -> dict[str, Any]:
    t = waits["timeouts"]
    return {
        "capacity_wait_s": waits["capacity_wait_s"] * SCALE,
        "timeouts": {
            # Nothing here waits to connect or for a first token (the engine answers at once),
            # nor stays silent mid-stream, and a loaded machine must not make a scaled-down
            # wait fire.
            "connect": t["connect"],
            "first_byte": t["first_byte"],
            "idle": t.get("idle", 60.0),
            "total": t["total"] * SCALE,
        },
    }


def gateway_settings(sim_url: str, database_url: str, waits: dict[str, Any]) -> Settings:
    return settings_from_dict(
        {
            "database_url": database_url,
            "secret_key": "nginx-test-secret-key-0123456789",
            "log_level": "WARNING",
            # One request at a time on `queued`: a second one waits in the gateway's queue.
            "backends": [
                {
                    "name": "q",
                    "engine": "vllm",
                    "url": sim_url,
                    "max_concurrent": 1,
                    "models": ["queued"],
                },
                {
                    "name": "s",
                    "engine": "vllm",
                    "url": sim_url,
                    "max_concurrent": 8,
                    "models": ["long"],
                },
            ],
            "models": [
                {"name": "queued", "context_length": CONTEXT},
                {"name": "long", "context_length": CONTEXT},
            ],
            "groups": [{"name": "testers"}],
            "users": [{"name": "tester", "group": "testers"}],
            **scaled(waits),
        }
    )


@dataclass
class Site:
    """A gateway and the nginx in front of it."""

    gateway: ThreadServer
    key: str
    https: str
    http: str
    ssl_context: ssl.SSLContext
    results: dict[str, Any] = field(default_factory=dict)

    def client(self, timeout: float) -> httpx.Client:
        return httpx.Client(
            verify=self.ssl_context,
            timeout=httpx.Timeout(timeout),
            headers={"Authorization": f"Bearer {self.key}"},
        )


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Site]]:
    tmp = tmp_path_factory.mktemp("nginx")
    sim = ThreadServer(
        build_sim_app(
            SimConfig(
                engine="vllm",
                models=[SimModel("queued", CONTEXT), SimModel("long", CONTEXT)],
                slots=16,
                tokens_per_second=TOKENS_PER_SECOND,
                default_tokens=DEFAULT_TOKENS,
            )
        )
    ).start()
    cert = self_signed_certificate(tmp / "tls")
    context = ssl.create_default_context(cafile=str(cert))
    variants = {
        # The example as documented (its timeout scaled), before the shipped gateway settings.
        "example": (example_read_timeout_s() * SCALE, shipped_waits()),
        # nginx's and the gateway's defaults.
        "defaults": (None if SCALE == 1 else NGINX_DEFAULT_READ_TIMEOUT_S * SCALE, default_waits()),
    }
    out: dict[str, Site] = {}
    with contextlib_exit_stack() as stack:
        stack.callback(sim.stop)
        for name, (read_timeout, waits) in variants.items():
            settings = gateway_settings(
                sim.url, f"sqlite+aiosqlite:///{tmp / name / 'mr.db'}", waits
            )
            key = asyncio.run(prepare_database(settings))
            gateway = ThreadServer(build_app(settings)).start()
            stack.callback(gateway.stop)
            warm_up(gateway.url, key)
            ports = Ports(*free_ports(2))
            text = site_config(
                gateway=f"127.0.0.1:{gateway.port}",
                ports=ports,
                tls=tmp / "tls",
                read_timeout_s=read_timeout,
            )
            stack.enter_context(running_nginx(tmp / name / "nginx", text, ports))
            out[name] = Site(
                gateway,
                key,
                f"https://127.0.0.1:{ports.https}",
                f"http://127.0.0.1:{ports.http}",
                context,
            )
        yield out


def warm_up(url: str, key: str) -> None:
    """One request first: the tokenizers load on first use, on the gateway and the engine."""
    with httpx.Client(timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
        for model in ("queued", "long"):
            client.post(f"{url}/v1/chat/completions", json=chat(model, 1, False))


def contextlib_exit_stack():  # type: ignore[no-untyped-def]
    import contextlib

    return contextlib.ExitStack()


def chat(model: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def hold_the_queue(site: Site, held: list[float]) -> None:
    """Streams `queued` directly from the gateway for QUEUED_S; its only slot is taken."""
    tokens = round(QUEUED_S * TOKENS_PER_SECOND)
    started = time.monotonic()
    with (
        site.client(STREAM_S * 4) as client,
        client.stream(
            "POST", f"{site.gateway.url}/v1/chat/completions", json=chat("queued", tokens, True)
        ) as r,
    ):
        assert r.status_code == 200
        for _ in r.iter_lines():
            if not held:
                held.append(time.monotonic())
    held.append(time.monotonic() - started)


def queued_request(site: Site) -> dict[str, Any]:
    started = time.monotonic()
    with site.client(STREAM_S * 4) as client:
        r = client.post(f"{site.https}/v1/chat/completions", json=chat("queued", 3, False))
    return {
        "status": r.status_code,
        "elapsed": time.monotonic() - started,
        "server": r.headers.get("server", ""),
        "text": r.text,
    }


def long_stream(site: Site) -> dict[str, Any]:
    tokens = round(STREAM_S * TOKENS_PER_SECOND)
    started = time.monotonic()
    chunks: list[dict[str, Any]] = []
    arrivals: list[float] = []
    with (
        site.client(STREAM_S * 4) as client,
        client.stream(
            "POST", f"{site.https}/v1/chat/completions", json=chat("long", tokens, True)
        ) as r,
    ):
        status = r.status_code
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
                arrivals.append(time.monotonic() - started)
    return {
        "status": status,
        "elapsed": time.monotonic() - started,
        "tokens": tokens,
        "chunks": chunks,
        "arrivals": arrivals,
    }


@pytest.fixture(scope="module")
def outcomes(sites: dict[str, Site]) -> dict[str, dict[str, Any]]:
    """Both sites at once: each queue held, then the queued request and the long stream."""
    holds: dict[str, list[float]] = {name: [] for name in sites}
    with ThreadPoolExecutor(8) as pool:
        holding = {n: pool.submit(hold_the_queue, s, holds[n]) for n, s in sites.items()}
        deadline = time.monotonic() + 60
        while not all(holds.values()):  # each hold has its first token: the slot is taken
            assert time.monotonic() < deadline, "the queue-holding streams did not start"
            for f in holding.values():
                if f.done():
                    f.result()
            time.sleep(0.01)
        queued = {n: pool.submit(queued_request, s) for n, s in sites.items()}
        streams = {n: pool.submit(long_stream, s) for n, s in sites.items()}
        for f in holding.values():
            f.result()
        return {
            name: {
                "held_s": holds[name][-1],
                "queued": queued[name].result(),
                "stream": streams[name].result(),
            }
            for name in sites
        }


def test_the_example_lets_a_request_queued_past_nginxs_default_through(
    outcomes: dict[str, dict[str, Any]],
) -> None:
    example = outcomes["example"]
    # The queue really was held longer than nginx waits by default.
    assert example["held_s"] > NGINX_DEFAULT_READ_TIMEOUT_S * SCALE
    queued = example["queued"]
    assert queued["status"] == 200, queued["text"]
    assert json.loads(queued["text"])["choices"][0]["message"]["content"]
    assert queued["elapsed"] > NGINX_DEFAULT_READ_TIMEOUT_S * SCALE


def test_with_nginxs_default_read_timeout_the_queued_request_gets_nginxs_504(
    outcomes: dict[str, dict[str, Any]],
) -> None:
    defaults = outcomes["defaults"]
    assert defaults["held_s"] > NGINX_DEFAULT_READ_TIMEOUT_S * SCALE
    queued = defaults["queued"]
    assert queued["status"] == 504
    assert queued["server"].startswith("nginx") and "Gateway Time-out" in queued["text"]
    # nginx gave up before the example's request, queued as long, was served.
    assert queued["elapsed"] < outcomes["example"]["queued"]["elapsed"]


def test_the_example_carries_a_five_minute_stream_to_the_end(
    outcomes: dict[str, dict[str, Any]],
) -> None:
    stream = outcomes["example"]["stream"]
    assert stream["status"] == 200
    text = [
        c for c in stream["chunks"] if c.get("choices") and c["choices"][0]["delta"].get("content")
    ]
    assert len(text) == stream["tokens"]
    finish = [c["choices"][0]["finish_reason"] for c in stream["chunks"] if c.get("choices")]
    assert finish[-1] == "length"
    assert stream["chunks"][-1]["usage"]["completion_tokens"] == stream["tokens"]
    assert stream["elapsed"] >= STREAM_S * 0.99  # paced by the engine: it did last that long
    # Passed on as generated, not at the end: the first token came in the stream's first tenth.
    assert stream["arrivals"][0] < stream["elapsed"] / 10


def test_with_the_defaults_the_stream_gets_through_too(
    outcomes: dict[str, dict[str, Any]],
) -> None:
    """nginx's default read timeout and the gateway's idle timeout bound silences, not lengths:
    a stream longer than both, whose tokens keep coming, is not cut by either."""
    stream = outcomes["defaults"]["stream"]
    assert stream["status"] == 200
    assert not [c for c in stream["chunks"] if "error" in c]
    text = [
        c for c in stream["chunks"] if c.get("choices") and c["choices"][0]["delta"].get("content")
    ]
    assert len(text) == stream["tokens"]
    assert stream["elapsed"] > NGINX_DEFAULT_READ_TIMEOUT_S * SCALE
    # Longer than the gateway's own default total as well, scaled like the rest.
    assert stream["elapsed"] > Settings().timeouts.total * SCALE


def test_the_example_waits_longer_than_the_gateway_can_keep_a_request_silent() -> None:
    """The example's read timeout is above the longest time a gateway with any shipped
    configuration can send nothing: the capacity wait, then every attempt up to its total."""
    read_timeout = example_read_timeout_s()
    configs = [
        SHIPPED_CONFIG,
        ROOT / "mindrouter.example.yaml",
        *sorted((DEPLOY / "kubernetes").glob("**/mindrouter.yaml")),
    ]
    for path in configs:
        raw = yaml.safe_load(path.read_text())
        for backend in raw.get("backends", []):
            backend.pop("api_key_file", None)  # a mounted secret, absent here
        s = settings_from_dict(raw)
        silent = s.capacity_wait_s + s.max_attempts * (s.timeouts.connect + s.timeouts.total)
        assert silent < read_timeout, path
    # And the streams those configurations allow last at least the five minutes.
    assert settings_from_dict(yaml.safe_load(SHIPPED_CONFIG.read_text())).timeouts.total >= 300


def test_only_the_client_paths_are_exposed(sites: dict[str, Site]) -> None:
    site = sites["example"]
    with site.client(30) as client:
        for path in ("/v1/models", "/api/tags", "/anthropic/v1/models", "/healthz", "/"):
            assert client.get(f"{site.https}{path}").status_code == 200, path
        for path in ("/admin/users", "/metrics", "/readyz", "/openapi.json"):
            assert client.get(f"{site.https}{path}").status_code == 404, path
            # ... which the gateway itself does serve (with an admin key for /admin).
            direct = client.get(f"{site.gateway.url}{path}")
            assert direct.status_code in (200, 401, 403), (path, direct.status_code)
        redirect = client.get(f"{site.http}/v1/models", follow_redirects=False)
        assert redirect.status_code == 301
        assert redirect.headers["location"].startswith("https://")


def test_large_bodies_reach_the_gateway(sites: dict[str, Site]) -> None:
    """Images travel inside the JSON: nginx's default 1 MB body limit would refuse them."""
    site = sites["example"]
    body = chat("long", 1, False)
    body["messages"][0]["content"] = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 3_000_000}},
    ]
    with site.client(60) as client:
        r = client.post(f"{site.https}/v1/chat/completions", json=body)
    assert r.status_code != 413
    assert "error" in r.json() or "choices" in r.json()  # the gateway's answer, not nginx's
