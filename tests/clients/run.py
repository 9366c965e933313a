"""Running a client as a subprocess: a clean environment, a time limit, and a record of every
network connection it opened (strace), so a test can assert it reached only the gateway."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TIMEOUT = 180.0
# What a client needs from the caller's environment; nothing else is passed on (no proxies, no
# API keys of the person running the tests).
KEPT = ("PATH", "LANG", "LC_ALL", "TERM", "TZ")
_CONNECT = re.compile(r"connect\(\d+, \{sa_family=(AF_INET6?), (.*?)\}")
_LOOPBACK = re.compile(r'inet_addr\("127\.|inet_pton\(AF_INET6, "::1"|"::ffff:127\.')


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    remote: list[str]  # connections to anything but loopback

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]

    def last_json(self) -> Any:
        return self.json_lines()[-1]

    def describe(self) -> str:
        out, err = self.stdout[-6000:], self.stderr[-6000:]
        return f"exit {self.returncode}\nstdout:\n{out}\nstderr:\n{err}"


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in KEPT}
    env.update(HOME=str(home), **extra)
    return env


def run_client(cmd: list[str], env: dict[str, str], cwd: Path, trace_dir: Path) -> Run:
    """Run `cmd` under `strace -f -e trace=connect`; `Run.remote` lists what it connected to
    beyond loopback (DNS lookups included)."""
    strace = shutil.which("strace")
    assert strace is not None, "strace is needed to check that the clients stay offline"
    trace = trace_dir / "connect.trace"
    full = [strace, "-f", "-qq", "-e", "trace=connect", "-o", str(trace), *cmd]
    proc = subprocess.run(
        full,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    remote = []
    for line in trace.read_text(errors="replace").splitlines():
        match = _CONNECT.search(line)
        if match and not _LOOPBACK.search(match.group(2)):
            remote.append(match.group(2))
    return Run(proc.returncode, proc.stdout, proc.stderr, remote)
