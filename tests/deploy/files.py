"""The deployment files as the tests read them: Kustomize overlays rendered by `kubectl
kustomize`, the Dockerfile as a list of instructions, the compose file as YAML."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUSTOMIZE = DEPLOY / "kubernetes"
OVERLAYS = ("small-site", "managed-services")


def render(overlay: str) -> list[dict[str, Any]]:
    """Every object `kubectl kustomize` makes of the overlay."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render the Kustomize overlays (it is on CI's machines)"
    done = subprocess.run(
        [kubectl, "kustomize", str(KUSTOMIZE / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def named_like(objects: list[dict[str, Any]], kind: str, prefix: str) -> dict[str, Any]:
    """The object whose name is `prefix` plus Kustomize's hash suffix."""
    found = [
        o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(prefix + "-")
    ]
    assert len(found) == 1, f"{kind}/{prefix}-*: {len(found)} found"
    return found[0]


@dataclass(frozen=True, slots=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY ...
    value: str  # the rest, continuation lines joined

    def exec_form(self) -> list[str]:
        """The JSON (exec) form's words: ENTRYPOINT ["mindrouter"] -> ["mindrouter"]."""
        parsed = yaml.safe_load(self.value)
        assert isinstance(parsed, list), f"{self.keyword} is not in exec form: {self.value}"
        return [str(p) for p in parsed]


def dockerfile(path: Path = DEPLOY / "Dockerfile") -> list[Instruction]:
    """Instructions of a Dockerfile; comments dropped, backslash continuations joined."""
    lines: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        if raw.lstrip().startswith("#") and not pending:
            continue
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        lines.append(pending + raw)
        pending = ""
    out = []
    for line in lines:
        if not line.strip():
            continue
        keyword, _, value = line.strip().partition(" ")
        out.append(Instruction(keyword.upper(), re.sub(r"\s+", " ", value).strip()))
    return out


def shell_words(command: str) -> list[list[str]]:
    """A shell command line split into its simple commands (at && and ;)."""
    commands: list[list[str]] = [[]]
    for word in shlex.split(command):
        if word in ("&&", ";", "||"):
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded
