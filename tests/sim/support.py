"""Helpers shared by the simulator tests: a running simulator and small wire utilities."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import ollama
import openai

from mindrouter.serving import ThreadServer
from mindrouter.sim import RequestRecord, SimConfig, SimModel, SimState, build_sim_app

CHAT_CONTEXT = 4096


def models_for(engine: str) -> list[SimModel]:
    tag = ":latest" if engine == "ollama" else ""
    return [
        SimModel(f"sim-chat{tag}", CHAT_CONTEXT),
        SimModel(f"sim-think{tag}"),
        SimModel(f"sim-vision{tag}", kind="vision"),
        SimModel(f"sim-embed{tag}", kind="embedding"),
    ]


@dataclass
class Sim:
    server: ThreadServer
    state: SimState
    _clients: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def config(self) -> SimConfig:
        return self.state.config

    # Clients are cached: building one loads the TLS trust store, which costs ~0.1 s.
    def openai(self) -> openai.OpenAI:
        if "openai" not in self._clients:
            self._clients["openai"] = openai.OpenAI(
                base_url=self.url + "/v1", api_key="sim", max_retries=0
            )
        client: openai.OpenAI = self._clients["openai"]
        return client

    def ollama(self) -> ollama.Client:
        if "ollama" not in self._clients:
            self._clients["ollama"] = ollama.Client(host=self.url)
        client: ollama.Client = self._clients["ollama"]
        return client

    def http(self) -> contextlib.nullcontext[httpx.Client]:
        """`with sim.http() as http:` gives the shared plain HTTP client."""
        if "http" not in self._clients:
            self._clients["http"] = httpx.Client(base_url=self.url, timeout=10)
        return contextlib.nullcontext(self._clients["http"])

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self.server.stop()

    def last_record(self, route: str | None = None) -> RequestRecord:
        records = [r for r in self.state.records if route is None or r.route == route]
        return records[-1]

    def wait_for(self, condition: Callable[[], bool], timeout: float = 3.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached in time")
            time.sleep(0.002)


def start_sim(config: SimConfig) -> Sim:
    app = build_sim_app(config)
    server = ThreadServer(app)
    # `bind_socket` makes the socket with protocol 0, so asyncio does not turn Nagle off for the
    # accepted connections and every keep-alive response waits ~40 ms for a delayed ACK. Setting
    # TCP_NODELAY on the listener is inherited by accepted sockets on Linux.
    server._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    server.start()
    return Sim(server, app.state.sim)


def sse_payloads(text: str) -> list[str]:
    """The `data:` payloads of an SSE body, in order (`[DONE]` included)."""
    return [line[len("data: ") :] for line in text.split("\n") if line.startswith("data: ")]
