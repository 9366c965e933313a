"""The browser suite's parts: Debian's Chromium through Playwright (never a downloaded browser),
and a real OpenID Connect provider (oidc-provider on the machine's node) from scripts/browser."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert os.access(CHROMIUM, os.X_OK), "install Chromium with scripts/system-deps"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class OidcProvider:
    def __init__(self, port: int, client_id: str, secret: str, redirect_uri: str) -> None:
        modules = os.environ.get("MINDROUTER_BROWSER_NODE_PATH")
        assert modules, "run the suite with scripts/browser test (it installs oidc-provider)"
        node = shutil.which("node")
        assert node, "the browser suite needs node"
        self.issuer = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [node, str(HERE / "oidc_provider.mjs"), str(port), client_id, secret, redirect_uri],
            env={**os.environ, "MINDROUTER_BROWSER_NODE_PATH": modules},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        seen = []
        for line in self.proc.stdout:
            seen.append(line)
            if line.startswith("ready "):
                return
        raise AssertionError("the OIDC provider did not start:\n" + "".join(seen))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
