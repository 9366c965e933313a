"""nginx from the system's packages (scripts/system-deps installs it), run in the foreground on
loopback ports with the documented example, deploy/nginx/mindrouter.conf.

`site_config` makes a runnable copy of the example: only what must differ on a test machine is
replaced (listen ports, the gateway's address, the certificate's path) and, when asked, the
read timeout; each replacement must match exactly once, so the test follows the example as it
changes instead of silently testing something else.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .files import DEPLOY

EXAMPLE = DEPLOY / "nginx" / "mindrouter.conf"
# nginx's own value when proxy_read_timeout is not set.
NGINX_DEFAULT_READ_TIMEOUT_S = 60.0
START_TIMEOUT_S = 30.0


def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else "")
    assert found, "nginx is missing: run scripts/system-deps (CI's .ci/run does)"
    return found


def example_read_timeout_s() -> float:
    (value,) = re.findall(r"^\s*proxy_read_timeout (\d+)s;", EXAMPLE.read_text(), re.MULTILINE)
    return float(value)


def _replace(text: str, pattern: str, new: str) -> str:
    out, count = re.subn(pattern, new, text, flags=re.MULTILINE)
    assert count == 1, f"the example no longer has exactly one match for {pattern!r}"
    return out


@dataclass(frozen=True, slots=True)
class Ports:
    http: int
    https: int


def site_config(*, gateway: str, ports: Ports, tls: Path, read_timeout_s: float | None) -> str:
    """The example, runnable here. `read_timeout_s` replaces proxy_read_timeout; None removes
    it, which leaves nginx's default."""
    text = EXAMPLE.read_text()
    text = _replace(
        text, r"^(\s*)server gateway-1:8000;\n\s*server gateway-2:8000;", rf"\1server {gateway};"
    )
    text = _replace(text, r"^(\s*)listen 80;", rf"\1listen 127.0.0.1:{ports.http};")
    text = _replace(text, r"^(\s*)listen 443 ssl;", rf"\1listen 127.0.0.1:{ports.https} ssl;")
    text = _replace(text, r"/etc/nginx/tls/fullchain\.pem", str(tls / "fullchain.pem"))
    text = _replace(text, r"/etc/nginx/tls/privkey\.pem", str(tls / "privkey.pem"))
    directive = (
        "" if read_timeout_s is None else f"proxy_read_timeout {round(read_timeout_s * 1000)}ms;"
    )
    return _replace(text, r"proxy_read_timeout \d+s;", directive)


def self_signed_certificate(directory: Path) -> Path:
    """A certificate for 127.0.0.1 (the file is its own CA for the client)."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(directory / "privkey.pem"), "-out", str(directory / "fullchain.pem")),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return directory / "fullchain.pem"


def _main_config(prefix: Path, site: Path) -> str:
    temp = "\n".join(
        f"    {kind}_temp_path {prefix / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    # Started as root, nginx runs its workers as `nobody`, who cannot write the request bodies it
    # buffers into the test's private folder: keep them as the user running the test.
    user = f"user {getpass.getuser()};\n" if os.geteuid() == 0 else ""
    return f"""daemon off;
{user}pid {prefix / "nginx.pid"};
error_log {prefix / "error.log"} info;
worker_processes 1;
events {{
    worker_connections 256;
}}
http {{
    access_log {prefix / "access.log"};
{temp}
    include {site};
}}
"""


@contextlib.contextmanager
def running_nginx(prefix: Path, site_text: str, ports: Ports) -> Iterator[subprocess.Popen[bytes]]:
    """nginx in the foreground with `site_text` as its only site; stopped at exit."""
    prefix.mkdir(parents=True, exist_ok=True)
    site = prefix / "mindrouter.conf"
    site.write_text(site_text)
    main = prefix / "nginx.conf"
    main.write_text(_main_config(prefix, site))
    binary = nginx_binary()
    check = subprocess.run(
        [binary, "-t", "-e", "stderr", "-p", str(prefix), "-c", str(main)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert check.returncode == 0, check.stderr
    with (prefix / "stderr.log").open("wb") as err:
        proc = subprocess.Popen(
            [binary, "-e", "stderr", "-p", str(prefix), "-c", str(main)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert proc.poll() is None, (prefix / "stderr.log").read_text()
            try:
                with socket.create_connection(("127.0.0.1", ports.https), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "nginx did not start listening"
                time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGQUIT)  # nginx's graceful stop
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
