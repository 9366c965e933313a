"""LiteLLM's proxy as a target of the overhead run, from its own virtual environment
(bench/overhead/litellm_env.py)."""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import yaml

from bench.overhead import litellm_env
from bench.overhead.targets import (
    GATEWAY_CORE,
    HOST,
    MODEL,
    Server,
    _spawn,
    _wait_ready,
)
from bench.ports import free_port


async def start_litellm(
    mock_port: int, workdir: Path, workers: int = 1, core: str = GATEWAY_CORE
) -> Server:
    """LiteLLM's proxy; `workers` > 1 is its own `--num_workers` (uvicorn's worker processes)."""
    name = "litellm" if workers == 1 else f"litellm-{workers}w"
    venv = litellm_env.ensure()
    master = "sk-bench-" + uuid4().hex
    config = {
        "model_list": [
            {
                "model_name": MODEL,
                "litellm_params": {
                    "model": f"openai/{MODEL}",
                    "api_base": f"http://{HOST}:{mock_port}/v1",
                    "api_key": "none",
                },
            }
        ],
        "litellm_settings": {"set_verbose": False, "drop_params": True},
        "general_settings": {"master_key": master},
    }
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    log = workdir / f"{name}.log"
    env: dict[str, str | None] = {
        "LITELLM_LOG": "WARNING",
        # The cost map is otherwise fetched from the network at start.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
        "DISABLE_ADMIN_UI": "True",
        # Its /v1/messages would otherwise translate to OpenAI's Responses API, which neither
        # the mock nor most OpenAI-compatible engines serve; MindRouter uses chat completions.
        "LITELLM_USE_CHAT_COMPLETIONS_URL_FOR_ANTHROPIC_MESSAGES": "True",
    }
    for var in ("DATABASE_URL", "REDIS_HOST", "REDIS_URL"):
        env[var] = None
    proc = _spawn(
        [
            str(venv / "bin" / "litellm"),
            "--config",
            str(path),
            "--host",
            HOST,
            "--port",
            str(port),
            "--num_workers",
            str(workers),
        ],
        log,
        core,
        env=env,
    )
    server = Server(
        name,
        port,
        proc,
        log,
        headers={"authorization": f"Bearer {master}"},
        info={
            "version": litellm_env.LITELLM,
            "mode": "bare: master key, no database",
            "workers": workers,
        },
    )
    try:
        await _wait_ready(server, "/health/liveliness")
    except BaseException:
        await server.stop()
        raise
    return server
