"""Request bodies of the OpenAI dialect: chat completions, legacy completions, embeddings, and
the rerank and score routes served beside them. Shared pieces (models, JSON schemas, images,
short texts) are used by the other dialects' strategies too."""

from __future__ import annotations

import base64
import random
from typing import Any

from hypothesis import strategies as st

from tests.fuzz.values import TEXTS, deep, field, request

ENGINES = ("vllm", "ollama", "llamacpp", "openai")
CHAT_MODELS = [f"{p}-{e}" for p in ("chat", "think", "vision") for e in ENGINES]
EMBED_MODELS = [f"embed-{e}" for e in ENGINES]
RERANK_MODELS = ["rr-vllm", "rr-llamacpp"]
# Models no backend serves, or a name only a careless client sends.
OTHER_MODELS = ["nope", "", "chat-vllm ", "CHAT-VLLM", "embed-vllm", "rr-vllm"]

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01"
PNG_B64 = base64.b64encode(PNG).decode()
BAD_B64 = ["", "!!!", "QQ", "A" * 5, "data:", "=" * 8, "iVBORw0KGgo=\x00"]


def models(names: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(names), st.sampled_from(names), st.sampled_from(OTHER_MODELS))


PLAIN = ["hi", "hello there", "what is 2+2", "tell me a story", "x", "Llamas live in the Andes"]
NAMES = ["f", "get_weather", "lookup", "a_b_c", "x1", "_", "F" * 64, "search_the_web"]
# Short texts, mostly plain, sometimes any Unicode (NUL included) or longer.
words = st.one_of(st.sampled_from(PLAIN), st.sampled_from(PLAIN), st.sampled_from(TEXTS))
small_tokens = st.integers(min_value=1, max_value=12)
unit = st.integers(0, 100).map(lambda i: i / 100)
names = st.sampled_from(NAMES)

LEAF_SCHEMAS: list[Any] = [
    {"type": "string"},
    {"type": "integer", "minimum": 0},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "string", "enum": ["a", "b"]},
    {"type": "null"},
    {},
]


def _schema(rng: random.Random, depth: int) -> Any:
    if depth == 0 or rng.random() < 0.4:
        return rng.choice(LEAF_SCHEMAS)
    if rng.random() < 0.3:
        return {"type": "array", "items": _schema(rng, depth - 1)}
    props = {rng.choice(NAMES): _schema(rng, depth - 1) for _ in range(rng.randint(0, 3))}
    return {"type": "object", "properties": props, "required": sorted(props)[: rng.randint(0, 3)]}


# Parameter and output schemas, made once (see values.py on why corpora).
SCHEMAS = [
    {"type": "object", "properties": {"x": _schema(rng, 3)}}
    for rng in [random.Random(22)]
    for _ in range(120)
] + [{"type": "object", "properties": {}}, {"type": "object", "properties": {"d": deep(60)}}]
object_schema = st.sampled_from(SCHEMAS)

image_b64 = st.one_of(st.just(PNG_B64), st.sampled_from(BAD_B64))
data_url = st.one_of(
    image_b64.map(lambda b: f"data:image/png;base64,{b}"),
    st.sampled_from(
        [
            "data:image/png;base64",
            "data:text/plain;base64," + PNG_B64,
            "data:image/png," + PNG_B64,
            "http://127.0.0.1:9/cat.png",
            "file:///etc/passwd",
            "",
        ]
    ),
)

# -- chat -----------------------------------------------------------------------------------------

text_part = st.builds(lambda t: {"type": "text", "text": t}, words)
image_part = st.builds(
    lambda url, detail: {"type": "image_url", "image_url": {"url": url, **detail}},
    data_url,
    st.sampled_from([{}, {"detail": "low"}, {"detail": "bogus"}]),
)
content = st.one_of(words, st.lists(st.one_of(text_part, image_part), min_size=1, max_size=3))
tool_call = st.builds(
    lambda i, name, args: {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": name, "arguments": args},
    },
    st.integers(0, 3),
    names,
    st.sampled_from(['{"a": 1}', "{}", "", "not json", '{"a": [1, {"b": null}]}']),
)
message = st.one_of(
    st.builds(lambda c: {"role": "user", "content": c}, content),
    st.builds(lambda c: {"role": "system", "content": c}, words),
    st.builds(lambda c: {"role": "developer", "content": c}, words),
    st.builds(lambda c: {"role": "assistant", "content": c}, words),
    st.builds(
        lambda calls: {"role": "assistant", "content": None, "tool_calls": calls},
        st.lists(tool_call, min_size=1, max_size=2),
    ),
    st.builds(
        lambda i, c: {"role": "tool", "tool_call_id": f"call_{i}", "content": c},
        st.integers(0, 3),
        words,
    ),
)
messages = st.lists(message, min_size=1, max_size=4).map(
    # Most conversations end with the user speaking, as real ones do.
    lambda ms: ms if ms[-1]["role"] == "user" else [*ms, {"role": "user", "content": "go on"}]
)
function_tool = st.builds(
    lambda name, desc, params: {
        "type": "function",
        "function": {"name": name, "description": desc, "parameters": params},
    },
    names,
    words,
    object_schema,
)
tool_choice = st.one_of(
    st.sampled_from(["auto", "none", "required"]),
    names.map(lambda n: {"type": "function", "function": {"name": n}}),
)
response_format = st.one_of(
    st.sampled_from([{"type": "text"}, {"type": "json_object"}]),
    st.builds(
        lambda s, strict: {
            "type": "json_schema",
            "json_schema": {"name": "out", "schema": s, "strict": strict},
        },
        object_schema,
        st.booleans(),
    ),
)
stop = st.one_of(words, st.lists(words, max_size=4))

SAMPLING = {
    "max_tokens": field(small_tokens),
    "temperature": field(unit.map(lambda u: 2 * u)),
    "top_p": field(unit),
    "stop": field(stop),
    "seed": field(st.integers(0, 2**31 - 1)),
    "n": field(st.just(1)),
    "stream": field(st.booleans()),
    "stream_options": field(st.builds(lambda u: {"include_usage": u}, st.booleans())),
    "user": field(words),
}

chat = request(
    {
        **SAMPLING,
        "model": field(models(CHAT_MODELS), optional=False),
        "messages": field(messages, optional=False),
        "max_completion_tokens": field(small_tokens),
        "top_k": field(st.integers(-1, 50)),
        "presence_penalty": field(unit.map(lambda u: 4 * u - 2)),
        "frequency_penalty": field(unit.map(lambda u: 4 * u - 2)),
        "tools": field(st.lists(function_tool, min_size=1, max_size=2)),
        "tool_choice": field(tool_choice),
        "parallel_tool_calls": field(st.booleans()),
        "response_format": field(response_format),
        "reasoning_effort": field(st.sampled_from(["low", "medium", "high", "minimal"])),
        "logprobs": field(st.booleans()),
        "metadata": field(st.dictionaries(names, words, max_size=2)),
    }
)

completion = request(
    {
        **SAMPLING,
        "model": field(models(CHAT_MODELS), optional=False),
        "prompt": field(st.one_of(words, st.lists(words, min_size=1, max_size=3)), False),
        "suffix": field(words),
        "echo": field(st.booleans()),
        "logprobs": field(st.integers(0, 5)),
    }
)

embedding = request(
    {
        "model": field(models(EMBED_MODELS), optional=False),
        "input": field(st.one_of(words, st.lists(words, min_size=1, max_size=4)), False),
        "encoding_format": field(st.sampled_from(["float", "base64"])),
        "dimensions": field(st.integers(1, 64)),
        "user": field(words),
    }
)

# -- rerank and score -----------------------------------------------------------------------------

documents = st.lists(st.one_of(words, words.map(lambda t: {"text": t})), min_size=1, max_size=4)
rerank = request(
    {
        "model": field(models(RERANK_MODELS), optional=False),
        "query": field(words, optional=False),
        "documents": field(documents, optional=False),
        "top_n": field(st.integers(0, 5)),
        "return_documents": field(st.booleans()),
    }
)
texts = st.one_of(words, st.lists(words, min_size=1, max_size=3))
score = request(
    {
        "model": field(models(RERANK_MODELS), optional=False),
        "text_1": field(texts, optional=False),
        "text_2": field(texts, optional=False),
    }
)
