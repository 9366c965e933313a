"""Claude Code (`claude -p`) through the gateway, set up as the README says, to every backend.

Claude Code sends about 48 KB per request: a system prompt in blocks with `cache_control`, a
system turn inside `messages` (its environment, after the user's message), a dozen tools,
`max_tokens: 32000`, adaptive thinking with `output_config.effort`, `context_management`,
`metadata.user_id`, `anthropic-beta` and `?beta=true`. The simulated model calls the first tool
(the Agent tool; its made-up agent type makes Claude Code answer with an error result), Claude
Code sends the result back, and the model answers: two streamed requests, both accounted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.clients.accounting import check_accounting, engine_totals
from tests.clients.conftest import ClientsEnv
from tests.clients.readme import claude_offline_env, claude_setup
from tests.clients.run import clean_env, run_client
from tests.clients.stack import ENGINES, Stack, model_name

pytestmark = pytest.mark.clients

PROMPT = "List the files in this directory."
FOLDING = ("vllm", "llamacpp")  # backends that get one leading system message


def run_claude(
    stack: Stack, env: ClientsEnv, tmp_path: Path, key: str, model: str, at_root: bool
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    readme_env, argv = claude_setup(stack.url, key, model)
    if at_root:
        readme_env["ANTHROPIC_BASE_URL"] = readme_env["ANTHROPIC_BASE_URL"].removesuffix(
            "/anthropic"
        )
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    cmd = [str(env.claude), *argv, "-p", PROMPT, "--output-format", "stream-json", "--verbose"]
    variables = {"CLAUDE_CONFIG_DIR": str(home / ".claude"), **readme_env, **claude_offline_env()}
    run = run_client(cmd, clean_env(home, **variables), work, tmp_path)
    assert run.returncode == 0, run.describe()
    assert run.remote == [], f"Claude Code went beyond the gateway: {run.remote}"
    lines = run.json_lines()
    result = lines[-1]
    assert result["type"] == "result" and result["subtype"] == "success", run.describe()
    assert result["is_error"] is False, run.describe()
    return lines, result


def blocks_of(lines: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [
        block
        for line in lines
        if line.get("type") in ("assistant", "user")
        for block in line["message"]["content"]
        if isinstance(block, dict) and block.get("type") == kind
    ]


def check_exchange(
    stack: Stack, lines: list[dict[str, Any]], result: dict[str, Any], engine: str, mark: int
) -> list[Any]:
    uses = blocks_of(lines, "tool_use")
    results = blocks_of(lines, "tool_result")
    assert len(uses) == 1 and len(results) == 1, lines
    assert results[0]["tool_use_id"] == uses[0]["id"]
    assert result["result"], "no final answer"
    records = stack.engine_records(engine, mark)
    assert len(records) == 2
    first, second = (r.body for r in records)
    assert len(first["tools"]) >= 11
    roles = [m["role"] for m in first["messages"]]
    if engine in FOLDING:
        assert roles == ["system", "user"]
    else:
        # Claude Code's environment: a system turn after the user's message, kept in place.
        assert roles == ["system", "user", "system"]
    # The tool's result reached the engine as a tool message.
    content = results[0]["content"]
    if isinstance(content, list):
        content = "".join(block.get("text", "") for block in content)
    assert content
    tool_messages = [m["content"] for m in second["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1 and content in tool_messages[0], tool_messages
    return records


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("at_root", [False, True], ids=["anthropic", "root"])
def test_claude_code_tool_loop(
    stack: Stack, clients_env: ClientsEnv, tmp_path: Path, engine: str, at_root: bool
) -> None:
    user, key = stack.user()
    mark = stack.mark(engine)
    lines, result = run_claude(stack, clients_env, tmp_path, key, model_name(engine), at_root)
    check_exchange(stack, lines, result, engine, mark)
    records, audit = check_accounting(stack, user, key, engine, mark)
    endpoint = "/v1/messages" if at_root else "/anthropic/v1/messages"
    assert {e["endpoint"] for e in audit} == {endpoint}
    assert [e["stream"] for e in audit] == [True, True]
    assert all(e["user_agent"].startswith("claude-cli/") for e in audit)
    # What Claude Code reports having used is what the engine counted.
    prompt, completion = engine_totals(records)
    reported = result["usage"]
    assert (reported["input_tokens"], reported["output_tokens"]) == (prompt, completion)


def test_claude_code_thinking_is_signed_and_replayed(
    stack: Stack, clients_env: ClientsEnv, tmp_path: Path
) -> None:
    """A model that reasons: its thinking reaches Claude Code as a signed block, which Claude
    Code sends back with the tool result; the engine sees it again as the turn's reasoning."""
    engine = "vllm"
    user, key = stack.user()
    mark = stack.mark(engine)
    lines, result = run_claude(
        stack, clients_env, tmp_path, key, model_name(engine, "think"), at_root=False
    )
    records = check_exchange(stack, lines, result, engine, mark)
    check_accounting(stack, user, key, engine, mark)
    thinking = blocks_of(lines, "thinking")
    assert thinking, lines
    replayed = [m for m in records[1].body["messages"] if m["role"] == "assistant"]
    assert replayed and replayed[0].get("reasoning"), replayed
