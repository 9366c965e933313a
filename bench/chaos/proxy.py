"""A small round-robin TCP proxy in front of the gateway replicas, on its own thread.

Each client connection goes to the next replica in turn; a replica that refuses the connection
(stopped, draining, restarting) is skipped for the next one, so only requests already running on
a replica that dies see it die.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable


class RoundRobinProxy:
    def __init__(self, upstreams: Callable[[], list[tuple[str, int]]]) -> None:
        self._upstreams = upstreams  # read per connection: replicas come back on new ports
        self._turn = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    def start(self) -> RoundRobinProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = future.result(10)
        return self

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        targets = self._upstreams()
        upstream = None
        first = next(self._turn)
        for i in range(len(targets)):
            host, port = targets[(first + i) % len(targets)]
            try:
                upstream = await asyncio.open_connection(host, port)
                break
            except OSError:
                continue
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer = upstream

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
