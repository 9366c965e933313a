"""The README's set-up lines for Claude Code and Codex, as the tests use them.

The tests run the clients with exactly these lines (the demo's address, key and model replaced
by the test stack's), so the README cannot drift from what works.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
DEMO_URL = "http://127.0.0.1:8000"
DEMO_KEY = "mr2_…"
DEMO_MODEL = "qwen3-8b"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(README.read_text())]


def _block(lang: str, marker: str) -> str:
    found = [text for kind, text in blocks() if kind == lang and marker in text]
    assert len(found) == 1, f"README: expected one {lang} block with {marker!r}, found {found}"
    return found[0]


def _fill(text: str, url: str, key: str, model: str) -> str:
    return text.replace(DEMO_URL, url).replace(DEMO_KEY, key).replace(DEMO_MODEL, model)


def claude_setup(url: str, key: str, model: str) -> tuple[dict[str, str], list[str]]:
    """The README's environment variables and `claude` command line."""
    env: dict[str, str] = {}
    argv: list[str] = []
    for line in _fill(_block("sh", "ANTHROPIC_BASE_URL"), url, key, model).splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["export"]:
            name, _, value = words[1].partition("=")
            env[name] = value
        elif words:
            argv = words
    assert argv[:1] == ["claude"], argv
    return env, argv[1:]


def codex_config(url: str, model: str) -> tuple[str, str]:
    """The README's Codex `config.toml` (the provider, then the lines that keep Codex offline)
    and the name of the variable that holds the key."""
    provider = _fill(_block("toml", "model_providers.mindrouter"), url, DEMO_KEY, model)
    offline = _block("toml", "check_for_update_on_startup")
    env_key = re.search(r'env_key = "(\w+)"', provider)
    assert env_key is not None
    return offline + provider, env_key.group(1)


def claude_offline_env() -> dict[str, str]:
    """The variable the README names to keep Claude Code from calling Anthropic's servers."""
    match = re.search(r"`(CLAUDE_CODE_\w+)=(\w+)`", README.read_text())
    assert match is not None, "README: no CLAUDE_CODE_...=... setting"
    return {match.group(1): match.group(2)}
