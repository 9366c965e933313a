"""The OpenAI Agents SDK through the gateway: one streamed agent run with a function tool.

Usage: agents_sdk.py BASE_URL responses|chat MODEL=API_KEY...

`responses` is the SDK's default model class (the Responses API, set up the way its docs say
for another provider: a default client); `chat` is `OpenAIChatCompletionsModel`. One run per
model, one after the other (the imports take longer than the runs). Prints one JSON object,
by model: the tool calls and outputs the run went through, the final text and the usage the SDK
summed over its model calls, or the error.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from typing import Any

from agents import (
    Agent,
    ItemHelpers,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

calls: list[dict[str, Any]] = []


@function_tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    calls.append({"city": city})
    return f"It is 4 degrees and raining in {city}."


async def run(base_url: str, key: str, model: str, mode: str) -> dict[str, Any]:
    calls.clear()
    client = AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
    if mode == "responses":
        set_default_openai_client(client, use_for_tracing=False)
        set_default_openai_api("responses")
        agent = Agent(
            name="weather", instructions="Answer briefly.", tools=[get_weather], model=model
        )
    else:
        chat = OpenAIChatCompletionsModel(model=model, openai_client=client)
        # Streamed chat completions carry usage only when asked (`stream_options`).
        agent = Agent(
            name="weather",
            instructions="Answer briefly.",
            tools=[get_weather],
            model=chat,
            model_settings=ModelSettings(include_usage=True),
        )
    result = Runner.run_streamed(agent, "What is the weather in Oslo?")
    events: list[str] = []
    outputs: list[str] = []
    async for event in result.stream_events():
        if event.type == "raw_response_event":
            events.append(getattr(event.data, "type", ""))
        elif event.type == "run_item_stream_event" and event.item.type == "tool_call_output_item":
            outputs.append(str(event.item.output))
    usage = result.context_wrapper.usage
    return {
        "tool_calls": list(calls),
        "tool_outputs": outputs,
        "final": ItemHelpers.text_message_outputs(result.new_items),
        "final_output": str(result.final_output),
        "raw_event_types": sorted(set(events)),
        "requests": usage.requests,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
    }


async def main(base_url: str, mode: str, pairs: list[str]) -> dict[str, Any]:
    # Traces would otherwise be exported to OpenAI's servers.
    set_tracing_disabled(True)
    results: dict[str, Any] = {}
    for pair in pairs:
        model, _, key = pair.partition("=")
        try:
            results[model] = await run(base_url, key, model, mode)
        except Exception:
            results[model] = {"error": traceback.format_exc()}
    return results


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))))
