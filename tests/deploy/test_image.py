"""The container image, checked without a Docker engine: deploy/Dockerfile installs exactly the
lockfile's runtime dependencies with the uv and the `uv sync --frozen` that scripts/env.sh (the
README's commands) uses, runs as a non-root user, and starts `mindrouter serve` on the config
path the Kubernetes and compose files mount."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from mindrouter.cli import build_parser

from .files import ROOT, Instruction, dockerfile, shell_words

ENV_SH = ROOT / "scripts" / "env.sh"
IMAGE_SYNC = ("--frozen", "--no-dev", "--no-editable", "--project", str(ROOT))


def env_sh_uv_version() -> str:
    found = re.search(r'^UV_VERSION="([^"]+)"', ENV_SH.read_text(), re.MULTILINE)
    assert found
    return found.group(1)


def env_sh_sync_flags() -> set[str]:
    (line,) = [ln for ln in ENV_SH.read_text().splitlines() if '"$UV" sync' in ln]
    return {w for w in line.split() if w.startswith("--") and w not in ("--quiet", "--project")}


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    out: list[list[Instruction]] = []
    for i in instructions:
        if i.keyword == "FROM":
            out.append([])
        if out:
            out[-1].append(i)
    return out


def commands(stage: list[Instruction]) -> list[list[str]]:
    return [words for i in stage if i.keyword == "RUN" for words in shell_words(i.value)]


def arg_default(name: str) -> str:
    for i in dockerfile():
        if i.keyword == "ARG" and i.value.startswith(f"{name}="):
            return i.value.split("=", 1)[1]
    raise AssertionError(f"no ARG {name}")


def test_two_stages_on_the_slim_python_image() -> None:
    built, final = stages(dockerfile())
    base = arg_default("PYTHON_IMAGE")
    assert re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?", base), base
    assert built[0].value == "${PYTHON_IMAGE} AS build"
    assert final[0].value == "${PYTHON_IMAGE}"
    # The final stage takes the environment only: no compiler, no uv, no sources.
    copies = [i.value for i in final if i.keyword == "COPY"]
    assert copies == ["--from=build /app/.venv /app/.venv"]
    assert not commands(final) or all(c[0] in ("groupadd", "useradd") for c in commands(final))


def test_dependencies_come_from_the_lockfile_with_the_scripts_own_commands() -> None:
    built, _ = stages(dockerfile())
    run = commands(built)
    # uv itself: the version env.sh pins, installed the way env.sh does it.
    assert arg_default("UV_VERSION") == env_sh_uv_version()
    assert ["python3", "-m", "venv", "/opt/tools"] in run
    pip = [c for c in run if "pip" in c[0]]
    assert len(pip) == 1 and pip[0][-1] == "uv==${UV_VERSION}"
    # The rest: uv sync, with env.sh's flags plus --no-dev; nothing installed any other way.
    syncs = [c for c in run if c[0].endswith("/uv")]
    assert syncs and all(c[1] == "sync" for c in syncs)
    for sync in syncs:
        assert env_sh_sync_flags() | {"--no-dev"} <= set(sync), sync
    assert not [c for c in run if c[0] in ("pip", "pip3", "uv") or c[:2] == ["uv", "pip"]]
    # The lockfile is in the build before the first sync.
    first_sync = next(
        n for n, i in enumerate(built) if i.keyword == "RUN" and " sync " in f" {i.value} "
    )
    copied = " ".join(i.value for i in built[:first_sync] if i.keyword == "COPY").split()
    assert {"pyproject.toml", "uv.lock", "README.md"} <= set(copied)


def test_the_sync_the_image_runs_installs_the_runtime_packages_only(tmp_path: Path) -> None:
    """`uv sync --frozen --no-dev` against this lockfile, as a dry run: it agrees with
    pyproject.toml (or --frozen would fail), and brings no development tool."""
    env = dict(os.environ, UV_PROJECT_ENVIRONMENT=str(tmp_path / "venv"))
    done = subprocess.run(
        [str(ROOT / ".tools" / "bin" / "uv"), "sync", *IMAGE_SYNC, "--dry-run", "--offline"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    installed = {
        line.split()[1].split("==")[0] for line in done.stderr.splitlines() if line.startswith(" +")
    }
    assert {"fastapi", "uvicorn", "sqlalchemy", "asyncpg", "redis", "mindrouter"} <= installed
    assert not {"pytest", "ruff", "mypy", "kubernetes-validate", "openai"} & installed


def test_a_non_root_user_runs_mindrouter_serve() -> None:
    _, final = stages(dockerfile())
    (user,) = [i.value for i in final if i.keyword == "USER"]
    uid, gid = (int(x) for x in user.split(":"))
    assert uid >= 1000 and gid >= 1000
    (entry,) = [i.exec_form() for i in final if i.keyword == "ENTRYPOINT"]
    (cmd,) = [i.exec_form() for i in final if i.keyword == "CMD"]
    assert entry == ["mindrouter"]
    ns = build_parser().parse_args(cmd)
    assert (ns.command, ns.config, ns.host) == (
        "serve",
        "/etc/mindrouter/mindrouter.yaml",
        "0.0.0.0",
    )
    (exposed,) = [i.value for i in final if i.keyword == "EXPOSE"]
    assert int(exposed) == ns.port


def test_the_healthcheck_asks_the_gateways_health_path() -> None:
    _, final = stages(dockerfile())
    (check,) = [i.value for i in final if i.keyword == "HEALTHCHECK"]
    assert "--interval=" in check and "--start-period=" in check
    command = Instruction("CMD", check.split(" CMD ", 1)[1]).exec_form()
    assert command[0] == "python"
    assert "http://127.0.0.1:8000/healthz" in command[-1]


def test_the_build_context_holds_what_the_copies_need_and_nothing_else() -> None:
    allowed = [
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    built, _ = stages(dockerfile())
    sources = [
        w
        for i in built
        if i.keyword == "COPY"
        for w in i.value.split()[:-1]
        if not w.startswith("--")
    ]
    assert sorted(set(sources)) == sorted(allowed)
    assert (ROOT / ".dockerignore").read_text().splitlines()[1] == "*"
