"""`mindrouter demo` comes up with zero configuration, and the curl line it prints works when
pasted as it is; the official SDKs work against it with the printed key."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from bench.ports import free_port


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    cwd = tmp_path_factory.mktemp("demo")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mindrouter.cli", "demo", "--port", str(port)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if "Press Ctrl-C" in line:
                break
        assert any("Press Ctrl-C" in line for line in lines), "\n".join(lines)
        assert (Path(cwd) / ".mindrouter" / "mindrouter.db").exists()
        yield f"http://127.0.0.1:{port}", lines
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_printed_curl_line_works_as_pasted(demo: tuple[str, list[str]]) -> None:
    _, lines = demo
    curl = next(line.strip() for line in lines if line.strip().startswith("curl "))
    out = subprocess.run(
        ["bash", "-c", curl], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"]


def test_openai_sdk_streams_and_embeds(demo: tuple[str, list[str]]) -> None:
    url, lines = demo
    key = re.search(r"(mr2_[A-Za-z0-9_-]+)", "\n".join(lines))
    assert key is not None
    client = openai.OpenAI(base_url=url + "/v1", api_key=key.group(1), max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="qwen3-8b", messages=[{"role": "user", "content": "Hi"}], stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) > 3
    emb = client.embeddings.create(model="nomic-embed-text", input="hello")
    assert len(emb.data[0].embedding) > 8


def test_rerank_curl_in_the_api_docs_works(demo: tuple[str, list[str]]) -> None:
    """docs/api.md's rerank example, with the demo's address and key put in, as a user would."""
    url, lines = demo
    key = re.search(r"(mr2_[A-Za-z0-9_-]+)", "\n".join(lines))
    assert key is not None
    docs = (Path(__file__).parent.parent / "docs" / "api.md").read_text()
    block = next(b for b in docs.split("```sh\n")[1:] if "/v1/rerank" in b).split("```")[0]
    command = block.replace("http://127.0.0.1:8000", url).replace("mr2_…", key.group(1))
    out = subprocess.run(
        ["bash", "-c", command], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert body["id"].startswith("rerank-") and body["model"] == "bge-reranker-v2-m3"
    assert [r["index"] for r in body["results"]] == [1, 0]
    assert "Llamas" in body["results"][0]["document"]["text"]


def test_console_sign_in_printed_works(demo: tuple[str, list[str]]) -> None:
    import httpx

    url, lines = demo
    console = next(line for line in lines if "Web console:" in line)
    assert f"{url}/console/" in console
    password = re.search(r"password: (\S+)", "\n".join(lines))
    assert password is not None
    client = httpx.Client(base_url=url)
    page = client.get("/console/sign-in").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    r = client.post(
        "/console/sign-in",
        data={"csrf": csrf.group(1), "username": "admin", "password": password.group(1)},
    )
    assert r.status_code == 303
    assert client.get("/console/admin/backends").status_code == 200
