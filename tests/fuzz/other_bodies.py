"""Request bodies of the Responses API, the Anthropic Messages API and Ollama's native API."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.fuzz.openai_bodies import (
    CHAT_MODELS,
    EMBED_MODELS,
    data_url,
    image_b64,
    models,
    names,
    object_schema,
    small_tokens,
    stop,
    unit,
    words,
)
from tests.fuzz.values import field, request

# -- Responses ------------------------------------------------------------------------------------

input_part = st.one_of(
    st.builds(lambda t: {"type": "input_text", "text": t}, words),
    st.builds(lambda u: {"type": "input_image", "image_url": u}, data_url),
)
input_item = st.one_of(
    st.builds(
        lambda role, c: {"role": role, "content": c},
        st.sampled_from(["user", "system", "developer", "assistant"]),
        st.one_of(words, st.lists(input_part, min_size=1, max_size=2)),
    ),
    st.builds(
        lambda i, name, args: {
            "type": "function_call",
            "call_id": f"call_{i}",
            "name": name,
            "arguments": args,
        },
        st.integers(0, 2),
        names,
        st.sampled_from(["{}", '{"x": 1}', "oops"]),
    ),
    st.builds(
        lambda i, out: {"type": "function_call_output", "call_id": f"call_{i}", "output": out},
        st.integers(0, 2),
        words,
    ),
)
responses_tool = st.builds(
    lambda name, params: {"type": "function", "name": name, "parameters": params},
    names,
    object_schema,
)
text_format = st.one_of(
    st.sampled_from([{"format": {"type": "text"}}, {"format": {"type": "json_object"}}]),
    object_schema.map(lambda s: {"format": {"type": "json_schema", "name": "o", "schema": s}}),
)
RESPONSES_FIELDS: dict[str, Any] = {
    "model": field(models(CHAT_MODELS), optional=False),
    "input": field(st.one_of(words, st.lists(input_item, min_size=1, max_size=3)), False),
    "instructions": field(words),
    "max_output_tokens": field(st.integers(16, 32)),
    "temperature": field(unit.map(lambda u: 2 * u)),
    "top_p": field(unit),
    "tools": field(st.lists(responses_tool, min_size=1, max_size=2)),
    "tool_choice": field(st.sampled_from(["auto", "none", "required"])),
    "text": field(text_format),
    "reasoning": field(st.builds(lambda e: {"effort": e}, st.sampled_from(["low", "high"]))),
    "store": field(st.booleans()),
    "metadata": field(st.dictionaries(names, words, max_size=2)),
    "truncation": field(st.sampled_from(["auto", "disabled"])),
}
responses = request({**RESPONSES_FIELDS, "stream": field(st.booleans())})
responses_input_tokens = request(RESPONSES_FIELDS)

# -- Anthropic ------------------------------------------------------------------------------------

block = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, words),
    st.builds(
        lambda kind, data: {
            "type": "image",
            "source": {"type": "base64", "media_type": kind, "data": data},
        },
        st.sampled_from(["image/png", "image/jpeg", "text/plain"]),
        image_b64,
    ),
    st.builds(lambda url: {"type": "image", "source": {"type": "url", "url": url}}, data_url),
    st.builds(
        lambda i, name, args: {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": args},
        st.integers(0, 2),
        names,
        st.dictionaries(names, words, max_size=2),
    ),
    st.builds(
        lambda i, c: {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": c},
        st.integers(0, 2),
        st.one_of(words, st.lists(st.builds(lambda t: {"type": "text", "text": t}, words))),
    ),
    st.builds(
        lambda t, sig: {"type": "thinking", "thinking": t, "signature": sig},
        words,
        st.sampled_from(["", "bogus", "A" * 64]),
    ),
)
turn = st.builds(
    lambda role, c: {"role": role, "content": c},
    st.sampled_from(["user", "user", "assistant"]),
    st.one_of(words, st.lists(block, min_size=1, max_size=3)),
)
anthropic_tool = st.builds(
    lambda name, desc, schema: {"name": name, "description": desc, "input_schema": schema},
    names,
    words,
    object_schema,
)
ANTHROPIC_FIELDS: dict[str, Any] = {
    "model": field(models(CHAT_MODELS), optional=False),
    "messages": field(st.lists(turn, min_size=1, max_size=4), optional=False),
    "system": field(st.one_of(words, st.lists(block, max_size=2))),
    "tools": field(st.lists(anthropic_tool, min_size=1, max_size=2)),
    "tool_choice": field(
        st.one_of(
            st.sampled_from([{"type": "auto"}, {"type": "any"}, {"type": "none"}]),
            names.map(lambda n: {"type": "tool", "name": n}),
        )
    ),
    "thinking": field(
        st.one_of(
            st.just({"type": "disabled"}),
            st.integers(1024, 2048).map(lambda b: {"type": "enabled", "budget_tokens": b}),
        )
    ),
}
anthropic_messages = request(
    {
        **ANTHROPIC_FIELDS,
        "max_tokens": field(small_tokens, optional=False),
        "temperature": field(unit),
        "top_p": field(unit),
        "top_k": field(st.integers(1, 50)),
        "stop_sequences": field(st.lists(words, max_size=3)),
        "stream": field(st.booleans()),
        "metadata": field(st.builds(lambda u: {"user_id": u}, words)),
    }
)
anthropic_count_tokens = request(ANTHROPIC_FIELDS)

# -- Ollama ---------------------------------------------------------------------------------------

options = st.fixed_dictionaries(
    {"num_predict": small_tokens},
    optional={
        "temperature": unit.map(lambda u: 2 * u),
        "top_k": st.integers(1, 50),
        "top_p": unit,
        "seed": st.integers(0, 2**31 - 1),
        "stop": st.lists(words, max_size=2),
        "num_ctx": st.integers(256, 8192),
        "repeat_penalty": unit.map(lambda u: 2 * u),
    },
)
ollama_message = st.one_of(
    st.builds(
        lambda role, c: {"role": role, "content": c},
        st.sampled_from(["user", "system", "assistant", "tool"]),
        words,
    ),
    st.builds(
        lambda c, imgs: {"role": "user", "content": c, "images": imgs},
        words,
        st.lists(image_b64, min_size=1, max_size=2),
    ),
    st.builds(
        lambda name, args: {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": name, "arguments": args}}],
        },
        names,
        st.dictionaries(names, words, max_size=2),
    ),
)
ollama_tool = st.builds(
    lambda name, params: {"type": "function", "function": {"name": name, "parameters": params}},
    names,
    object_schema,
)
OLLAMA_COMMON: dict[str, Any] = {
    "model": field(models(CHAT_MODELS), optional=False),
    "stream": field(st.booleans()),
    "format": field(st.one_of(st.just("json"), object_schema)),
    "options": field(options),
    "keep_alive": field(st.one_of(st.sampled_from(["5m", "0", "-1", "1h"]), st.integers(-1, 600))),
    "think": field(st.one_of(st.booleans(), st.sampled_from(["low", "high"]))),
}
ollama_chat = request(
    {
        **OLLAMA_COMMON,
        "messages": field(st.lists(ollama_message, min_size=1, max_size=3), optional=False),
        "tools": field(st.lists(ollama_tool, min_size=1, max_size=2)),
    }
)
ollama_generate = request(
    {
        **OLLAMA_COMMON,
        "prompt": field(words, optional=False),
        "suffix": field(words),
        "system": field(words),
        "raw": field(st.booleans()),
        "images": field(st.lists(image_b64, min_size=1, max_size=2)),
        "stop": field(stop),
    }
)
ollama_embed = request(
    {
        "model": field(models(EMBED_MODELS), optional=False),
        "input": field(st.one_of(words, st.lists(words, min_size=1, max_size=3)), False),
        "truncate": field(st.booleans()),
        "dimensions": field(st.integers(1, 64)),
        "options": field(options),
        "keep_alive": field(st.sampled_from(["5m", "0"])),
    }
)
ollama_embeddings = request(
    {
        "model": field(models(EMBED_MODELS), optional=False),
        "prompt": field(words, optional=False),
        "options": field(options),
    }
)
ollama_show = request(
    {
        "model": field(models([*CHAT_MODELS, *EMBED_MODELS]), optional=False),
        "verbose": field(st.booleans()),
    }
)
