"""LangChain's chat models through the gateway: invoke, then a streamed tool loop.

Usage: langchain_chat.py openai|anthropic|ollama GATEWAY_URL MODEL=API_KEY...

For each model, one after the other (the imports take longer than the calls): one plain
`invoke`, then with `bind_tools` a streamed turn that calls the tool, the tool's result, and a
streamed turn that answers. Prints one JSON object, by model: the texts, the tool call and each
call's `usage_metadata`, or the error.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"It is 4 degrees and raining in {city}."


def chat_model(kind: str, url: str, key: str, model: str) -> BaseChatModel:
    if kind == "openai":
        from langchain_openai import ChatOpenAI

        # stream_usage: streamed chunks carry usage only when asked.
        return ChatOpenAI(
            model=model, base_url=url + "/v1", api_key=key, max_retries=0, stream_usage=True
        )
    if kind == "anthropic":
        from langchain_anthropic import ChatAnthropic

        return ChatAnthropic(
            model_name=model, base_url=url + "/anthropic", api_key=key, max_retries=0, timeout=60
        )
    from langchain_ollama import ChatOllama

    return ChatOllama(
        model=model, base_url=url, client_kwargs={"headers": {"Authorization": f"Bearer {key}"}}
    )


def streamed(model: Any, messages: list[BaseMessage]) -> AIMessageChunk:
    merged: AIMessageChunk | None = None
    chunks = 0
    for chunk in model.stream(messages):
        chunks += 1
        merged = chunk if merged is None else merged + chunk
    assert merged is not None and chunks > 1, f"{chunks} chunks: not streamed"
    return merged


def usage(message: Any) -> dict[str, int] | None:
    meta = message.usage_metadata
    return None if meta is None else {k: meta[k] for k in ("input_tokens", "output_tokens")}


def run(kind: str, url: str, key: str, model: str) -> dict[str, Any]:
    llm = chat_model(kind, url, key, model)
    plain = llm.invoke("Say hello.")
    bound = llm.bind_tools([get_weather])
    messages: list[BaseMessage] = [HumanMessage("What is the weather in Oslo?")]
    first = streamed(bound, messages)
    calls = first.tool_calls
    messages.append(first)
    for call in calls:
        output = get_weather.invoke(call["args"])
        messages.append(ToolMessage(output, tool_call_id=call["id"]))
    second = streamed(bound, messages)
    return {
        "invoke_text": plain.text,
        "invoke_usage": usage(plain),
        "tool_calls": [{"name": c["name"], "args": c["args"], "id": c["id"]} for c in calls],
        "first_usage": usage(first),
        "final_text": second.text,
        "final_tool_calls": len(second.tool_calls),
        "final_usage": usage(second),
    }


def main(kind: str, url: str, pairs: list[str]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for pair in pairs:
        model, _, key = pair.partition("=")
        try:
            results[model] = run(kind, url, key, model)
        except Exception:
            results[model] = {"error": traceback.format_exc()}
    return results


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3:])))
