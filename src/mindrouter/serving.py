"""Run an ASGI application with uvicorn on a socket we bind ourselves.

Binding first lets callers ask for port 0 and learn the real port before any request is sent,
which the demo (several in-process servers) and the tests (many servers, no fixed ports) rely on.

uvicorn's own X-Forwarded-For handling is off: it would believe any loopback peer by default, and
the gateway applies its own rule (`trusted_proxies`) where the client address is needed. An app
that sets `app.state.connection_policy` (the gateway does) is served with the connection
defences of `http/connections.py`, wherever it is started: `serve`, the demo, tests, benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from mindrouter.http.connections import ConnectionPolicy, guarded_protocol
from mindrouter.tasks import pause, release


def bind_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit this; without it Nagle's algorithm holds small responses back
    # for tens of milliseconds waiting for the peer's delayed ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _config(app: Any, log_level: str, graceful: float = 2.0) -> uvicorn.Config:
    policy = getattr(getattr(app, "state", None), "connection_policy", None)
    return uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=math.ceil(graceful),
        proxy_headers=False,
        http=guarded_protocol(policy) if isinstance(policy, ConnectionPolicy) else "auto",
    )


class _Server(uvicorn.Server):
    """uvicorn's server, with SIGTERM/SIGINT handled here: `on_signal` runs first (the drain
    starts), and the signal is not raised again after the shutdown, which uvicorn does and which
    would make a clean drain exit with the signal's status instead of 0.

    uvicorn's main loop wakes ten times a second to look at `should_exit`, which is most of an
    idle gateway's wake-ups; here setting it (from any thread) wakes the loop, which otherwise
    ticks once a second, as often as uvicorn refreshes its Date header."""

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[], None] | None) -> None:
        self._exiting = False
        self._exit_waiter: asyncio.Future[None] | None = None
        super().__init__(config)
        self._on_signal = on_signal

    @property
    def should_exit(self) -> bool:
        return self._exiting

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._exiting = value
        waiter = self._exit_waiter
        if value and waiter is not None:
            waiter.get_loop().call_soon_threadsafe(release, waiter)

    async def main_loop(self) -> None:
        loop = asyncio.get_running_loop()
        # Tick 0 of uvicorn's ten a second is the one with the once-a-second work.
        while not await self.on_tick(0):
            waiter = self._exit_waiter = loop.create_future()
            if self._exiting:  # set between the tick and the waiter
                break
            try:
                await pause(waiter, 1.0)
            finally:
                self._exit_waiter = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        loop = asyncio.get_running_loop()

        def stop(sig: int) -> None:
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            if self._on_signal is not None:
                self._on_signal()
            self.should_exit = True

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop, sig)
        try:
            yield
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)


class InLoopServer:
    """A uvicorn server running as a task of the current event loop.

    `graceful`: how long the shutdown waits for responses in flight before cancelling them;
    `on_signal`: called on SIGTERM/SIGINT (main thread only) before the shutdown starts;
    `sock`: serve this listening socket instead of binding one.
    """

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        *,
        graceful: float = 2.0,
        on_signal: Callable[[], None] | None = None,
        sock: socket.socket | None = None,
    ):
        # `sock`: a listening socket bound elsewhere (a `serve --workers` supervisor's).
        self._sock = sock if sock is not None else bind_socket(host, port)
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        self._server = _Server(_config(app, log_level, graceful), on_signal)
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        self._server.config.setup_event_loop = lambda: None  # type: ignore[method-assign]
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._sock.close()

    async def serve_forever(self) -> None:
        await self.start()
        assert self._task is not None
        await self._task


class ThreadServer:
    """A uvicorn server on its own thread and event loop, for synchronous callers (tests, SDKs)."""

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"
    ):
        self._sock = bind_socket(host, port)
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        self._server = uvicorn.Server(_config(app, log_level))
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> ThreadServer:
        def run() -> None:
            try:
                asyncio.run(self._server.serve(sockets=[self._sock]))
            except BaseException as exc:  # surfaced to the starting thread below
                self._error = exc

        self._thread = threading.Thread(target=run, name=f"server:{self.port}", daemon=True)
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"server on port {self.port} failed to start") from self._error
            self._thread.join(0.005)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self._sock.close()

    def __enter__(self) -> ThreadServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
