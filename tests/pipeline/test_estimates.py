"""The input estimate of a request: exact tiktoken counts, large prompts counted off the loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mindrouter.canonical import ChatRequest
from mindrouter.canonical.content import Message, TextPart
from mindrouter.canonical.request import Tool
from mindrouter.pipeline import flight
from mindrouter.pipeline.flight import OFF_LOOP_CHARS, estimate_input, estimate_input_off_loop


def chat(text: str, tools: int = 0) -> ChatRequest:
    return ChatRequest(
        model="m",
        messages=[Message(role="user", content=[TextPart(text)])],
        tools=[
            Tool(name=f"t{i}", description="look things up " * 20, parameters={"type": "object"})
            for i in range(tools)
        ],
    )


@pytest.mark.parametrize("size", [10, OFF_LOOP_CHARS - 1, OFF_LOOP_CHARS, 4 * OFF_LOOP_CHARS])
async def test_the_count_is_the_same_on_or_off_the_loop(size: int) -> None:
    req = chat(("word " * size)[:size], tools=3)
    assert await estimate_input_off_loop(req) == estimate_input(req)


async def test_a_large_prompt_is_counted_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads: list[int] = []
    real = flight.estimate_input

    def recording(req: ChatRequest) -> int:
        threads.append(threading.get_ident())
        return real(req)

    monkeypatch.setattr(flight, "estimate_input", recording)
    loop_thread = threading.get_ident()
    await estimate_input_off_loop(chat("short question"))
    await estimate_input_off_loop(chat("x " * OFF_LOOP_CHARS))
    assert threads[0] == loop_thread
    assert threads[1] != loop_thread
    # And the loop kept running while it was counted.
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    await estimate_input_off_loop(chat("lorem ipsum dolor " * 100_000))
    ticker.cancel()
    assert ticks > 1
