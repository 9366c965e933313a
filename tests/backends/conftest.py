from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from mindrouter.backends import EngineAdapter, build_adapter
from mindrouter.routing.backend_config import Engine
from mindrouter.serving import ThreadServer

from .fake_engine import FakeEngine


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeEngine]:
    fake = FakeEngine()
    server = ThreadServer(fake)
    # Without TCP_NODELAY on the listening socket, uvloop's accepted sockets keep Nagle on and
    # every small response waits ~40 ms for the client's delayed ACK.
    server._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with server:
        fake.url = server.url
        yield fake


@pytest.fixture
def engine(fake_server: FakeEngine) -> FakeEngine:
    fake_server.reset()
    return fake_server


@pytest.fixture
async def make_adapter(engine: FakeEngine) -> AsyncIterator[Callable[..., Any]]:
    """Adapters pointed at the fake engine, closed after the test."""
    made: list[EngineAdapter] = []

    def make(kind: Engine, **kw: Any) -> Any:
        adapter = build_adapter(kind, kw.pop("url", engine.url), name=kind, **kw)
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        await adapter.aclose()
