"""The pure parts of the simulators: reply plans, schemas, tokenizer, vectors, slots."""

from __future__ import annotations

import asyncio
import json

from mindrouter.sim.embedding import embedding_vector, to_base64
from mindrouter.sim.engine import SlotPool
from mindrouter.sim.schema import instance_for_schema
from mindrouter.sim.text import ReplySpec, ToolSpec, calls_tool, fragments, plan_reply
from mindrouter.sim.tokenizer import ChatMessage, count_tokens, render_chat


def spec(**changes: object) -> ReplySpec:
    base = ReplySpec(seed_text="hello", budget=None, default_tokens=10)
    for key, value in changes.items():
        setattr(base, key, value)
    return base


def test_plans_are_deterministic_and_one_word_per_token() -> None:
    first, again, other = plan_reply(spec()), plan_reply(spec()), plan_reply(spec(seed_text="x"))
    assert first.content == again.content != other.content
    assert first.completion_tokens == 10 == len(first.content.split(" "))
    assert first.finish == "stop" and first.eos


def test_budget_cuts_with_length() -> None:
    plan = plan_reply(spec(budget=4))
    assert plan.completion_tokens == 4 and plan.finish == "length" and not plan.eos
    assert plan_reply(spec(budget=0)).steps == []
    assert plan_reply(spec(budget=3, ignore_eos=True)).completion_tokens == 3
    assert plan_reply(spec(budget=30, ignore_eos=True)).completion_tokens == 30


def test_stop_strings_spanning_tokens_are_held_back() -> None:
    plan = plan_reply(spec(stop_test=True, stop=["a E"]))
    assert plan.content == "alpha bet"
    assert "".join(s.text for s in plan.steps) == plan.content
    assert plan.stop_word == "a E" and plan.finish == "stop" and plan.completion_tokens == 3
    unhit = plan_reply(spec(stop=["ZZZ"]))
    assert unhit.stop_word is None and unhit.completion_tokens == 10


def test_reasoning_takes_part_of_the_length() -> None:
    plan = plan_reply(spec(thinking=True, default_tokens=24))
    assert plan.reasoning_tokens == 8 and plan.completion_tokens == 24
    assert [s.kind for s in plan.steps] == ["reasoning"] * 8 + ["content"] * 16


def test_tool_call_plan() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    plan = plan_reply(spec(tool=ToolSpec("find", schema)))
    assert plan.finish == "tool_calls" and plan.tool_call is not None
    assert plan.steps[0].kind == "tool_call"
    assert json.loads(plan.tool_call.arguments).keys() == {"q"}
    cut = plan_reply(spec(tool=ToolSpec("find", schema), budget=2))
    assert cut.finish == "length" and cut.completion_tokens == 2


def test_tool_call_rule_lets_agent_loops_end() -> None:
    assert calls_tool(["user"])
    assert calls_tool(["system", "user"])
    # Claude Code: the environment as a system turn after the user's message.
    assert calls_tool(["system", "user", "system"])
    assert calls_tool(["user", "assistant", "tool", "assistant", "user", "developer"])
    assert not calls_tool([])
    assert not calls_tool(["system"])
    assert not calls_tool(["user", "assistant"])
    assert not calls_tool(["user", "assistant", "tool"])
    assert not calls_tool(["user", "assistant", "function"])
    # A tool result followed by the client's own user message (Claude Code's reminders).
    assert not calls_tool(["user", "assistant", "tool", "user"])
    assert not calls_tool(["user", "assistant", "tool", "user", "system"])


def test_fragments() -> None:
    assert fragments("") == []
    assert len(fragments("{}")) == 2
    for text in ('{"a":1}', '{"city":"oslo","days":3}', "x" * 100):
        pieces = fragments(text)
        assert "".join(pieces) == text and len(pieces) >= 3


def test_schema_instances() -> None:
    words = iter(["w1", "w2", "w3", "w4", "w5", "w6"])
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "n": {"type": ["number", "null"]},
            "i": {"type": "integer", "minimum": 5},
            "b": {"type": "boolean"},
            "e": {"enum": ["x", "y"]},
            "c": {"const": 7},
            "d": {"type": "string", "format": "date"},
            "arr": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 2},
            "any": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
            "all": {"allOf": [{"properties": {"p": {"type": "boolean"}}}]},
        },
        "$defs": {"Item": {"type": "object", "properties": {"name": {"type": "string"}}}},
    }
    value = instance_for_schema(schema, lambda: next(words))
    assert value == {
        "s": "w1",
        "n": 1.5,
        "i": 5,
        "b": True,
        "e": "x",
        "c": 7,
        "d": "2026-01-01",
        "arr": [{"name": "w2"}, {"name": "w3"}],
        "any": 1,
        "all": {"p": True},
    }
    assert instance_for_schema({}, lambda: "w") == "w"


def test_chat_template_and_counts() -> None:
    messages = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hi", images=2)]
    rendered = render_chat(messages, tools=[{"type": "function"}])
    assert rendered == (
        '<|tools|>\n[{"type":"function"}]\n<|system|>\nBe brief.\n'
        "<|user|>\nHi<image><image>\n<|assistant|>\n"
    )
    assert count_tokens("<|endoftext|>") > 1  # special-looking text is ordinary text


def test_embedding_vectors() -> None:
    one, same, other = embedding_vector("a", 8), embedding_vector("a", 8), embedding_vector("b", 8)
    assert one == same != other and len(one) == 8
    assert abs(sum(v * v for v in one) - 1) < 1e-6
    assert to_base64(one) != to_base64(other)


async def test_slot_pool_is_fifo_and_survives_cancellation() -> None:
    limit = 1
    pool = SlotPool(lambda: limit)
    order: list[int] = []
    await pool.acquire()

    async def wait(n: int) -> None:
        await pool.acquire()
        order.append(n)

    tasks = [asyncio.create_task(wait(n)) for n in range(3)]
    await asyncio.sleep(0)
    assert pool.waiting == 3
    tasks[1].cancel()
    await asyncio.sleep(0)
    assert pool.waiting == 2
    pool.release()
    await asyncio.sleep(0)
    assert order == [0]
    limit = 3
    pool.limit_changed()
    await asyncio.sleep(0)
    assert order == [0, 2] and pool.running == 2 and pool.waiting == 0
