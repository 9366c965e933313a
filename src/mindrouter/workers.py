"""`serve --workers N`: a supervisor and N gateway processes on one listening socket.

The supervisor binds the socket and every worker inherits it (its descriptor number is passed
as `serve --listen-fd`), rather than each worker binding its own with SO_REUSEPORT:

- Connections wait in one accept queue that all workers take from. When a worker dies, the
  connections it had not yet accepted stay in that queue for the others; with SO_REUSEPORT each
  worker has its own queue and the kernel resets whatever was queued on a dying worker's.
- `--port 0` works: the supervisor learns the real port once, and every worker serves it.

Limits, fair share, breakers and slots are shared between the workers the way they are between
replicas, through Redis, which is why several workers need a `redis_url`: without it each
worker would count alone and a user could hold N times their concurrency.

A worker that dies is started again (after a short pause that grows if it keeps dying young);
a worker that refuses to start (exit status 1: the configuration or database is wrong) stops
the whole server, since its replacement would refuse too. SIGTERM or SIGINT reaches every
worker, which drains (`shutdown_grace_s`) and exits; the supervisor exits 0 once all have.
SIGHUP is passed on: each worker reloads the configuration file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from mindrouter.serving import bind_socket

# A worker's exit status when it refuses to start (`serve` prints why and returns 1).
REFUSED = 1
# A worker that dies sooner than this after starting waits before its next start, twice as
# long each time up to MAX_PAUSE_S, so a crash loop does not spin the machine.
YOUNG_S = 10.0
FIRST_PAUSE_S = 0.5
MAX_PAUSE_S = 30.0


class WorkersRefused(Exception):
    """Several workers were asked for in a set-up that cannot share state between them."""


def worker_count(value: str) -> int:
    """`--workers`: a positive number, or `auto` for the cores this process may run on."""
    if value == "auto":
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # not Linux
            return os.cpu_count() or 1
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"--workers: a positive number or 'auto', got {value!r}") from None
    if n < 1:
        raise ValueError(f"--workers: a positive number or 'auto', got {value!r}")
    return n


def check_shared_state(workers: int, redis_url: str | None) -> None:
    if workers > 1 and not redis_url:
        raise WorkersRefused(
            f"--workers {workers} needs redis_url: limits, fair share, circuit breakers and "
            "backend slots are shared between worker processes through Redis, and without it "
            f"each worker would enforce them alone (a user could hold {workers} times their "
            "max_concurrent). Set redis_url, or run one worker."
        )


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    pause_s: float = 0.0
    due: float = 0.0  # when a dead worker may start again
    restarts: int = field(default=0)


class Supervisor:
    """Starts `count` workers of `serve --config CONFIG` on one socket and keeps them running."""

    def __init__(self, config: str, host: str, port: int, count: int) -> None:
        self.config = config
        self.count = count
        self.sock = bind_socket(host, port)
        self.sock.set_inheritable(True)
        self.host = host
        self.port: int = self.sock.getsockname()[1]
        self._workers = [_Worker(i) for i in range(count)]
        self._wake = threading.Event()
        self._stopping = False
        self._hangup = False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _start(self, w: _Worker) -> None:
        fd = self.sock.fileno()
        command = [sys.executable, "-m", "mindrouter.cli", "serve", "--config", self.config]
        command += ["--listen-fd", str(fd), "--worker-index", str(w.index)]
        w.proc = subprocess.Popen(command, pass_fds=(fd,), stdin=subprocess.DEVNULL)
        w.started = time.monotonic()

    def _signal(self, sig: int) -> None:
        for w in self._workers:
            if w.proc is not None and w.proc.poll() is None:
                w.proc.send_signal(sig)

    def _on_signal(self, sig: int, _frame: object) -> None:
        if sig == signal.SIGHUP:
            self._hangup = True
        elif sig in (signal.SIGTERM, signal.SIGINT):
            self._stopping = True
        self._wake.set()

    def run(self) -> int:
        """Until SIGTERM/SIGINT and every worker has drained (0), or a worker refused (1)."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, self._on_signal)
        print(f"MindRouter listening on {self.url} ({self.count} workers)", flush=True)
        for w in self._workers:
            self._start(w)
        status = 0
        while True:
            # Woken by SIGCHLD or a stop/reload signal; the timeout only starts paused workers.
            self._wake.wait(1.0)
            self._wake.clear()
            if self._hangup:
                self._hangup = False
                self._signal(signal.SIGHUP)
            if self._stopping:
                break
            if self._reap():
                status = REFUSED
                break
        self._signal(signal.SIGTERM)
        for w in self._workers:
            if w.proc is not None:
                w.proc.wait()
        self.sock.close()
        return status

    def _reap(self) -> bool:
        """Starts again every worker that died; True when one refused to start."""
        now = time.monotonic()
        for w in self._workers:
            if w.proc is not None and w.proc.poll() is not None:
                code = w.proc.returncode
                w.proc = None
                if code == REFUSED:
                    print(
                        f"mindrouter serve: worker {w.index} refused to start; stopping",
                        file=sys.stderr,
                        flush=True,
                    )
                    return True
                young = now - w.started < YOUNG_S
                w.pause_s = min(MAX_PAUSE_S, max(FIRST_PAUSE_S, w.pause_s * 2)) if young else 0
                w.due = now + w.pause_s
                print(
                    f"mindrouter serve: worker {w.index} exited ({_describe(code)}); "
                    f"starting it again" + (f" in {w.pause_s:g} s" if w.pause_s else ""),
                    file=sys.stderr,
                    flush=True,
                )
            if w.proc is None and now >= w.due:
                w.restarts += 1
                self._start(w)
        return False


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"status {code}"
