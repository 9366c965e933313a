"""Hypothesis strategies for the values a hostile or careless client puts in a request.

Leaf values come from fixed corpora made once from seeded generators (`TEXTS`, `JUNK`): every
primitive draw costs Hypothesis tens of microseconds on a loaded machine, a string drawn
character by character costs milliseconds, and thousands of requests must fit in the suite's
time. So the variety lives in the corpora (any Unicode, NUL bytes, lone surrogates, integers past
every column, nesting around the edge's depth limit, wrong types) and Hypothesis picks and
combines, with few draws per request.

`request(fields)` builds a body from `field(...)` entries: every field valid (the request should
succeed), one broken (the answer should be a 400 naming it) or anything goes; which optional
fields appear is one draw of a bit mask, which shrinks towards the smallest body.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

EDGE_INTS = [0, -1, 1, 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1]
EDGE_FLOATS = [0.0, -0.0, 1e-320, 1e30, -1e30, 1.7976931348623157e308, 0.5, 2.5, 1e-7]
EDGE_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\ud800",
    "\udfff",
    "\u202e",
    "\ufeff",
    "𝔘",
    "../../etc/passwd",
    "%00",
    "${jndi:x}",
    "<script>",
    "mr2_" + "A" * 43,
    "null",
    "true",
    "9" * 40,
    "x" * 5000,
]
ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyz ",
    "".join(map(chr, range(32))) + "\x7f",
    "".join(map(chr, range(0x80, 0x800, 7))),
    "".join(map(chr, range(0x800, 0xD800, 97))) + "".join(map(chr, range(0xE000, 0x10000, 89))),
    "".join(map(chr, range(0x10000, 0x110000, 4099))),
    '"\\/{}[]:,\u2028\u2029\x85\r\n\t',
]


def deep(depth: int, leaf: Any = 1) -> Any:
    """`leaf` inside `depth` levels of alternating objects and arrays."""
    v = leaf
    for i in range(depth):
        v = [v] if i % 2 else {"k": v}
    return v


def _texts(rng: random.Random, count: int) -> list[str]:
    out = []
    for _ in range(count):
        alphabet = "".join(rng.sample(ALPHABETS, rng.randint(1, 3)))
        size = rng.choice([0, 1, 3, 8, 20, 60])
        out.append("".join(rng.choice(alphabet) for _ in range(size)))
    return out


TEXTS = EDGE_TEXT + _texts(random.Random(20), 400)


def _scalar(rng: random.Random) -> Any:
    pick = rng.randrange(6)
    if pick == 0:
        return rng.choice([None, True, False])
    if pick == 1:
        return rng.choice(EDGE_INTS)
    if pick == 2:
        return rng.choice([rng.randint(-1000, 1000), rng.uniform(-1e6, 1e6)])
    if pick == 3:
        return rng.choice(EDGE_FLOATS)
    return rng.choice(TEXTS)


def _junk(rng: random.Random, budget: int) -> Any:
    if budget <= 1 or rng.random() < 0.4:
        return _scalar(rng)
    size = rng.randint(0, min(4, budget))
    if rng.random() < 0.5:
        return [_junk(rng, budget // 2) for _ in range(size)]
    return {rng.choice(TEXTS): _junk(rng, budget // 2) for _ in range(size)}


def _junk_corpus(rng: random.Random) -> list[Any]:
    values = [_junk(rng, 12) for _ in range(500)]
    # Around the edge's depth limit (64) and where later stages would once fail.
    values += [deep(d) for d in (62, 63, 64, 65, 66, 70, 130, 300)]
    return values


JUNK = _junk_corpus(random.Random(21))
texts = st.sampled_from(TEXTS)
junk = st.sampled_from(JUNK)


@dataclass(frozen=True)
class Field:
    valid: st.SearchStrategy[Any]
    optional: bool


def field(valid: st.SearchStrategy[Any], optional: bool = True) -> Field:
    return Field(valid, optional)


MODES = ["valid", "valid", "one", "chaos"]


@st.composite
def request(draw: st.DrawFn, fields: dict[str, Field]) -> dict[str, Any]:
    """A body from `fields`: all valid, one broken (junk or left out), or chaos (any field valid,
    junk or left out); broken bodies sometimes carry unknown extra fields too."""
    names = sorted(fields)
    mode = draw(st.sampled_from(MODES))
    present = draw(st.integers(0, 2 ** len(names) - 1))
    spoilt = draw(st.integers(0, 2 ** len(names) - 1)) if mode == "chaos" else 0
    if mode == "one":
        spoilt = 1 << draw(st.integers(0, len(names) - 1))
    body: dict[str, Any] = {}
    for i, name in enumerate(names):
        f = fields[name]
        bit = 1 << i
        if spoilt & bit:
            if present & bit:
                body[name] = draw(junk)
        elif not f.optional or present & bit:
            body[name] = draw(f.valid)
    if mode != "valid" and draw(st.integers(0, 3)) == 0:
        body[draw(texts)] = draw(junk)
    return body
