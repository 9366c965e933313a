"""The input estimate of a request: exact tiktoken counts, large prompts counted off the loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mindrouter.canonical import ChatRequest
from mindrouter.canonical.content import Message, TextPart
from mindrouter.canonical.request import Tool
from mindrouter.pipeline import estimate
from mindrouter.pipeline.estimate import OFF_LOOP_CHARS, estimate_input, estimate_input_off_loop


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
    real = estimate.estimate_input

    def recording(req: ChatRequest, limit: int | None = None) -> int:
        threads.append(threading.get_ident())
        return real(req, limit)

    monkeypatch.setattr(estimate, "estimate_input", recording)
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


def test_with_a_limit_counting_stops_soon_after_it() -> None:
    req = chat("word " * 400_000, tools=2)  # some 400 000 tokens
    full = estimate_input(req)
    capped = estimate_input(req, limit=10_000)
    assert 10_000 < capped < 40_000 < full
    # A limit the input stays under changes nothing.
    assert estimate_input(req, limit=full) == full


def test_two_messages_past_the_limit_are_not_counted() -> None:
    first = Message(role="user", content=[TextPart("word " * 100_000)])
    second = Message(role="user", content=[TextPart("other " * 100_000)])
    req = ChatRequest(model="m", messages=[first, second])
    assert 1_000 < estimate_input(req, limit=1_000) < estimate_input(chat("word " * 100_000))
