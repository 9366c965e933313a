"""A redis-server of a test's own, on a free port, that the test may kill and start again empty
(the shared server on 6379 is never touched)."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OwnRedis:
    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.workdir = workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OwnRedis:
        """Starts with no data: nothing is saved or loaded (no RDB, no AOF)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        try:
            for _ in range(200):  # bounded wait for the port to answer
                try:
                    if client.ping():
                        return self
                except redis.exceptions.ConnectionError:
                    time.sleep(0.05)
        finally:
            client.close()
        raise AssertionError(f"redis-server on port {self.port} did not start")

    def kill(self) -> None:
        """SIGKILL: everything it held is gone."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def restart_empty(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        self.kill()
