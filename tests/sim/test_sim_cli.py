"""`mindrouter sim` flags, the configuration they build and the blocking runner."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import httpx
import pytest

from mindrouter.sim import SimConfig, SimModel, parse_model_spec
from mindrouter.sim.cli import add_sim_arguments, sim_config_from_args


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_sim_arguments(parser)
    return parser.parse_args(argv)


def test_every_flag_reaches_the_config() -> None:
    ns = parse(
        "--engine", "vllm", "--host", "0.0.0.0", "--port", "8001",
        "--model", "qwen3-8b:32768", "--model", "small",
        "--vision-model", "llava:7b", "--embedding-model", "bge-m3",
        "--rerank-model", "bge-reranker:4096",
        "--slots", "2", "--tokens-per-second", "50", "--ttft-ms", "120",
        "--fail-rate", "0.25", "--fail-status", "503", "--hang-rate", "0.1",
        "--drop-after", "7", "--default-tokens", "9", "--seed", "42",
        "--reasoning-field", "reasoning_content",
    )  # fmt: skip
    assert (ns.host, ns.port) == ("0.0.0.0", 8001)
    config = sim_config_from_args(ns)
    assert config == SimConfig(
        engine="vllm",
        models=[
            SimModel("qwen3-8b", 32768),
            SimModel("small", 8192),
            SimModel("llava:7b", 8192, "vision"),
            SimModel("bge-m3", 8192, "embedding"),
            SimModel("bge-reranker", 4096, "rerank"),
        ],
        slots=2,
        tokens_per_second=50.0,
        ttft_ms=120.0,
        default_tokens=9,
        fail_rate=0.25,
        fail_status=503,
        hang_rate=0.1,
        drop_after=7,
        seed=42,
        reasoning_field="reasoning_content",
    )


def test_defaults_give_one_chat_model() -> None:
    vllm = sim_config_from_args(parse("--engine", "vllm", "--port", "0"))
    assert vllm.models == [SimModel("sim-chat")]
    assert (vllm.slots, vllm.fail_status, vllm.drop_after, vllm.default_tokens) == (
        4,
        500,
        None,
        24,
    )
    ollama = sim_config_from_args(parse("--engine", "ollama", "--port", "0"))
    assert ollama.models == [SimModel("sim-chat:latest")]


@pytest.mark.parametrize(
    "argv",
    [
        ("--port", "1"),
        ("--engine", "tgi", "--port", "1"),
        ("--engine", "vllm"),
        ("--engine", "vllm", "--port", "1", "--fail-rate", "1.5"),
        ("--engine", "vllm", "--port", "1", "--slots", "0"),
        ("--engine", "vllm", "--port", "1", "--model", "x:0"),
    ],
)
def test_bad_flags_are_refused(argv: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit):
        parse(*argv)


def test_ollama_takes_no_rerank_model() -> None:
    ns = parse("--engine", "ollama", "--port", "0", "--rerank-model", "bge-reranker")
    with pytest.raises(ValueError, match="Ollama has no rerank API"):
        sim_config_from_args(ns)


def test_model_spec_keeps_ollama_tags() -> None:
    assert parse_model_spec("qwen3:8b") == SimModel("qwen3:8b", 8192)
    assert parse_model_spec("qwen3:8b:32768") == SimModel("qwen3:8b", 32768)
    assert parse_model_spec("org/model:4096") == SimModel("org/model", 4096)
    assert parse_model_spec("llama3:latest", "vision") == SimModel("llama3:latest", kind="vision")


def test_python_dash_m_serves_until_interrupted() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "mindrouter.sim", "--engine", "llamacpp", "--port", "0",
         "--model", "tiny:1024"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert process.stderr is not None
        banner = process.stderr.readline()
        assert "llamacpp on http://127.0.0.1:" in banner and banner.endswith("serving tiny\n")
        url = banner.split(" on ")[1].split(" ")[0]
        deadline = time.monotonic() + 10
        while True:
            try:
                assert httpx.get(url + "/health").json() == {"status": "ok"}
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        props = httpx.get(url + "/props").json()
        assert props["default_generation_settings"]["n_ctx"] == 1024
    finally:
        process.send_signal(2)
        assert process.wait(10) == 0
