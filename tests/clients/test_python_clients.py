"""The OpenAI Agents SDK and LangChain's chat models through the gateway, to every backend.

Each runs in the clients' own virtualenv (`scripts/*.py`, printing what it saw as JSON): the
Agents SDK with its default model class (the Responses API) and with the chat completions model,
a function tool in a streamed run; LangChain's ChatOpenAI, ChatAnthropic and ChatOllama with
`invoke`, then `bind_tools` and a streamed tool loop. One process per client serves every
backend in turn (importing the clients takes longer than the exchanges), each backend with its
own user, so each test reads only its own audit records and charges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.clients.accounting import check_accounting, engine_totals
from tests.clients.conftest import ClientsEnv
from tests.clients.run import clean_env, run_client
from tests.clients.stack import ENGINES, Stack, model_name

pytestmark = pytest.mark.clients

SCRIPTS = Path(__file__).parent / "scripts"


@dataclass
class Session:
    """One backend's part of a batched run: its user, where its engine's records started."""

    user: str
    key: str
    mark: int
    result: dict[str, Any]


Batch = Callable[[str, str], Session]


def batches(
    stack: Stack,
    env: ClientsEnv,
    tmp: pytest.TempPathFactory,
    script: str,
    head: Callable[[str], list[str]],
) -> Batch:
    """`get(variant, engine)`: the script is run once per variant, for every engine."""
    done: dict[str, dict[str, Session]] = {}

    def get(variant: str, engine: str) -> Session:
        if variant not in done:
            users = {e: stack.user() for e in ENGINES}
            marks = {e: stack.mark(e) for e in ENGINES}
            pairs = [f"{model_name(e)}={users[e][1]}" for e in ENGINES]
            folder = tmp.mktemp(f"{script}-{variant}")
            cmd = [str(env.python), str(SCRIPTS / script), *head(variant), *pairs]
            run = run_client(cmd, clean_env(folder), folder, folder)
            assert run.returncode == 0, run.describe()
            assert run.remote == [], f"{script} went beyond the gateway: {run.remote}"
            results = run.last_json()
            done[variant] = {
                e: Session(*users[e], marks[e], results[model_name(e)]) for e in ENGINES
            }
        session = done[variant][engine]
        assert "error" not in session.result, session.result["error"]
        return session

    return get


@pytest.fixture(scope="module")
def agents(
    stack: Stack, clients_env: ClientsEnv, tmp_path_factory: pytest.TempPathFactory
) -> Batch:
    return batches(
        stack,
        clients_env,
        tmp_path_factory,
        "agents_sdk.py",
        lambda mode: [stack.url + "/v1", mode],
    )


@pytest.fixture(scope="module")
def langchain(
    stack: Stack, clients_env: ClientsEnv, tmp_path_factory: pytest.TempPathFactory
) -> Batch:
    return batches(
        stack, clients_env, tmp_path_factory, "langchain_chat.py", lambda kind: [kind, stack.url]
    )


def tool_output_reached(record: Any) -> bool:
    return any(
        m["role"] == "tool" and "4 degrees" in str(m["content"]) for m in record.body["messages"]
    )


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("mode", ["responses", "chat"])
def test_agents_sdk_tool_run(stack: Stack, agents: Batch, engine: str, mode: str) -> None:
    session = agents(mode, engine)
    out = session.result
    assert len(out["tool_calls"]) == 1 and isinstance(out["tool_calls"][0]["city"], str)
    city = out["tool_calls"][0]["city"]
    assert out["tool_outputs"] == [f"It is 4 degrees and raining in {city}."]
    assert out["final"] and out["final"] == out["final_output"]
    records, audit = check_accounting(stack, session.user, session.key, engine, session.mark)
    assert len(records) == out["requests"] == 2
    assert [e["stream"] for e in audit] == [True, True]
    endpoint = "/v1/responses" if mode == "responses" else "/v1/chat/completions"
    assert {e["endpoint"] for e in audit} == {endpoint}
    assert tool_output_reached(records[1])
    # What the SDK summed over the run is what the engine counted.
    assert (out["input_tokens"], out["output_tokens"]) == engine_totals(records)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
def test_langchain_chat_model(stack: Stack, langchain: Batch, engine: str, kind: str) -> None:
    session = langchain(kind, engine)
    out = session.result
    assert out["invoke_text"]
    assert [c["name"] for c in out["tool_calls"]] == ["get_weather"]
    assert isinstance(out["tool_calls"][0]["args"]["city"], str)
    assert out["final_text"] and out["final_tool_calls"] == 0
    records, audit = check_accounting(stack, session.user, session.key, engine, session.mark)
    # The tool loop streamed; `invoke` is a plain request, except that ChatOllama streams it too.
    assert [e["stream"] for e in audit] == [kind == "ollama", True, True]
    endpoint = {"openai": "/v1/chat/completions", "anthropic": "/anthropic/v1/messages"}
    assert {e["endpoint"] for e in audit} == {endpoint.get(kind, "/api/chat")}
    assert tool_output_reached(records[2])
    # Each call's usage, as LangChain reports it, is the engine's count.
    reported = [out["invoke_usage"], out["first_usage"], out["final_usage"]]
    counted = [
        {"input_tokens": r.prompt_tokens, "output_tokens": r.completion_tokens} for r in records
    ]
    assert reported == counted
