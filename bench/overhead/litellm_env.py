"""LiteLLM proxy in its own virtual environment, outside the repository; never a project dependency.

    .venv/bin/python -m bench.overhead.litellm_env      # install (or check) and print the path

The version is pinned. Its `[proxy]` extra cannot be installed as a whole here (later releases
need packages the registry does not serve, and the extra drags in cloud SDKs), so the packages
its proxy server actually imports at start are listed by hand, found by starting
`litellm --config x.yaml` and adding each missing module until it served requests. The version
ranges are the ones litellm's own metadata gives for its proxy extra.

httptools is not in the extra, but uvicorn uses it when present; it is installed so that the
peer runs on the same HTTP parser as MindRouter (uvicorn[standard]) rather than the slower h11.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

LITELLM = "litellm==1.106.12"
PROXY_PACKAGES = (
    "uvicorn>=0.33.0,<1.0",
    "uvloop>=0.22.1,<1.0",
    "httptools>=0.6",
    "fastapi>=0.136.3,<1.0",
    "starlette>=1.0.1,<2.0",
    "backoff>=2.2.1,<3.0",
    "orjson>=3.11.6,<4.0",
    "apscheduler>=3.11.2,<4.0",
    "pyjwt>=2.13.0,<3.0",
    "python-multipart>=0.0.27,<1.0",
    "cryptography>=49.0.0,<51.0",
    "websockets>=15.0.1,<16.0",
    "redis>=5",
    "mcp>=2.2.0,<3",
    "expression>=5.6.0,<6.0",
    "fastapi-sso>=0.19.0,<1.0",
    "soundfile>=0.12.1,<1.0",
)
BASE_PYTHON = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"


def venv_path() -> Path:
    default = Path.home() / ".cache" / "mindrouter" / "litellm-venv"
    return Path(os.environ.get("MINDROUTER_LITELLM_VENV", default))


def _stamp() -> str:
    return hashlib.sha256("\n".join((LITELLM, *PROXY_PACKAGES)).encode()).hexdigest()[:16]


def ensure() -> Path:
    """The virtual environment with LiteLLM's proxy installed; installs it the first time."""
    venv = venv_path()
    marker = venv / ".mindrouter-bench"
    if marker.is_file() and marker.read_text().strip() == _stamp():
        return venv
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv} ...", file=sys.stderr, flush=True)
        venv.parent.mkdir(parents=True, exist_ok=True)
        base = BASE_PYTHON if BASE_PYTHON.exists() else Path(sys.executable)
        subprocess.run([str(base), "-m", "venv", str(venv)], check=True)
    print(f"installing {LITELLM} and its proxy packages into {venv} ...", file=sys.stderr)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", LITELLM, *PROXY_PACKAGES], check=True
    )
    # The proxy imports these at start; failing here names the missing one.
    subprocess.run(
        [str(python), "-c", "import litellm.proxy.proxy_server"],
        check=True,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    marker.write_text(_stamp() + "\n")
    return venv


if __name__ == "__main__":
    print(ensure())
