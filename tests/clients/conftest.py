"""The real clients against the gateway in front of simulated engines.

The tools come from the cache `scripts/clients setup` builds outside the clone; its `env` file
names Claude Code's and Codex's executables and the Python of a virtualenv with the Agents SDK
and LangChain's chat models (a separate interpreter: those clients run as subprocesses and print
what they saw as JSON). Without the cache the suite fails; it never skips.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.clients.stack import Stack, start_stack


@dataclass(frozen=True)
class ClientsEnv:
    claude: Path
    codex: Path
    python: Path


def read_env(path: Path) -> dict[str, str]:
    pairs = (line.partition("=") for line in path.read_text().splitlines())
    return {name.strip(): value.strip() for name, sep, value in pairs if sep}


def env_file() -> Path:
    cache = os.environ.get("MINDROUTER_CACHE") or str(Path.home() / ".cache" / "mindrouter")
    return Path(cache) / "clients" / "env"


@pytest.fixture(scope="session")
def clients_env() -> ClientsEnv:
    path = env_file()
    if not path.is_file():
        pytest.fail(
            f"the clients cache is missing ({path} does not exist): run `scripts/clients setup`"
            " (or `scripts/clients test`, which builds it first)",
            pytrace=False,
        )
    values = read_env(path)
    found = ClientsEnv(
        Path(values.get("CLAUDE_BIN", "")),
        Path(values.get("CODEX_BIN", "")),
        Path(values.get("CLIENTS_PYTHON", "")),
    )
    for name, binary in vars(found).items():
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            pytest.fail(
                f"{path} names {name}={binary}, which is not an executable:"
                " run `scripts/clients setup` to rebuild the cache",
                pytrace=False,
            )
    return found


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    s = start_stack()
    try:
        yield s
    finally:
        s.close()
