"""Codex (`codex exec`) through the gateway's Responses API, set up as the README says.

Codex sends developer and user messages as input items, nine tools (function tools, a
`namespace` group and the hosted `web_search`), `reasoning.summary`, `store: false`,
`include: ["reasoning.encrypted_content"]`, `prompt_cache_key` and `client_metadata`. The
simulated model calls the first tool (`exec_command`); Codex runs it, or reports why it could
not, as the call's output, and the model answers: two streamed requests, both accounted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.clients.accounting import check_accounting, engine_totals
from tests.clients.conftest import ClientsEnv
from tests.clients.readme import codex_config
from tests.clients.run import clean_env, run_client
from tests.clients.stack import ENGINES, Stack, model_name

pytestmark = pytest.mark.clients

PROMPT = "List the files in this directory."


def run_codex(
    stack: Stack, env: ClientsEnv, tmp_path: Path, key: str, model: str
) -> list[dict[str, Any]]:
    config, key_variable = codex_config(stack.url, model)
    home, codex_home, work = tmp_path / "home", tmp_path / "codex", tmp_path / "work"
    for folder in (home, codex_home, work):
        folder.mkdir()
    (codex_home / "config.toml").write_text(config)
    cmd = [str(env.codex), "exec", "--skip-git-repo-check", "--json", PROMPT]
    variables = {"CODEX_HOME": str(codex_home), key_variable: key, "RUST_LOG": "error"}
    run = run_client(cmd, clean_env(home, **variables), work, tmp_path)
    assert run.returncode == 0, run.describe()
    assert run.remote == [], f"Codex went beyond the gateway: {run.remote}"
    events = run.json_lines()
    assert not [e for e in events if e["type"] in ("error", "turn.failed")], run.describe()
    return events


def check_exchange(stack: Stack, events: list[dict[str, Any]], engine: str, mark: int) -> Any:
    messages = [
        e["item"]
        for e in events
        if e["type"] == "item.completed" and e["item"]["type"] == "agent_message"
    ]
    assert messages and messages[-1]["text"], events
    records = stack.engine_records(engine, mark)
    assert len(records) == 2
    first, second = records
    assert first.finish_reason == "tool_calls"
    # The hosted web_search tool is left out; the namespace's tools are flattened in.
    names = [t["function"]["name"] for t in first.body["tools"]]
    assert "exec_command" in names and "spawn_agent" in names and len(names) >= 12
    calls = [m for m in second.body["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    results = [m for m in second.body["messages"] if m["role"] == "tool"]
    assert len(calls) == 1 and len(results) == 1, second.body["messages"]
    call_id = calls[0]["tool_calls"][0]["id"]
    # Ollama's wire pairs a result with its call by the tool's name where ids are missing.
    assert results[0].get("tool_call_id", call_id) == call_id
    assert results[0]["content"], "Codex sent an empty output"
    return records


@pytest.mark.parametrize("engine", ENGINES)
def test_codex_tool_loop(
    stack: Stack, clients_env: ClientsEnv, tmp_path: Path, engine: str
) -> None:
    user, key = stack.user()
    mark = stack.mark(engine)
    events = run_codex(stack, clients_env, tmp_path, key, model_name(engine))
    check_exchange(stack, events, engine, mark)
    records, audit = check_accounting(stack, user, key, engine, mark)
    assert {e["endpoint"] for e in audit} == {"/v1/responses"}
    assert [e["stream"] for e in audit] == [True, True]
    # What Codex reports having used is what the engine counted.
    usage = [e["usage"] for e in events if e["type"] == "turn.completed"][-1]
    prompt, completion = engine_totals(records)
    assert (usage["input_tokens"], usage["output_tokens"]) == (prompt, completion)


def test_codex_reasoning_is_replayed(stack: Stack, clients_env: ClientsEnv, tmp_path: Path) -> None:
    """A model that reasons: Codex shows the reasoning and sends it back with the tool's output
    (`store: false`, so as an input item); the engine sees it again as the turn's reasoning."""
    engine = "llamacpp"
    user, key = stack.user()
    mark = stack.mark(engine)
    events = run_codex(stack, clients_env, tmp_path, key, model_name(engine, "think"))
    records = check_exchange(stack, events, engine, mark)
    check_accounting(stack, user, key, engine, mark)
    reasoning = [
        e for e in events if e["type"] == "item.completed" and e["item"]["type"] == "reasoning"
    ]
    assert reasoning, events
    replayed = [m for m in records[1].body["messages"] if m["role"] == "assistant"]
    assert replayed and replayed[0].get("reasoning_content"), replayed
