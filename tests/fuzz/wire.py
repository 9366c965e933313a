"""What surrounds a body on the wire: keys and headers, broken bytes, odd methods and paths."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

from tests.fuzz.probe import Dialect
from tests.fuzz.target import Target
from tests.fuzz.values import TEXTS

WRONG_KEYS = [
    "",
    "Bearer",
    "Basic dXNlcjpwYXNz",
    "Bearer mr2_short",
    "Bearer mr2_" + "A" * 43,
    "Bearer mr2_" + "B" * 300,
    "Bearer sk-" + "x" * 40,
    "bearer  mr2_" + "C" * 43,
]


@dataclass(frozen=True)
class Auth:
    """How a request authenticates, resolved against each target's own keys:
    `user`, `user-x-api-key`, `admin`, `metrics`, `near-miss` (the user key with a character
    added), or `raw` (the Authorization header `value`, none when empty); `extra` headers
    are added."""

    kind: str
    value: str = ""
    extra: tuple[tuple[str, str], ...] = ()

    def headers(self, t: Target) -> dict[str, str]:
        h: dict[str, str] = dict(self.extra)
        if self.kind == "user":
            h["Authorization"] = f"Bearer {t.key}"
        elif self.kind == "user-x-api-key":
            h["x-api-key"] = t.key
        elif self.kind == "admin":
            h["Authorization"] = f"Bearer {t.admin_key}"
        elif self.kind == "metrics":
            h["Authorization"] = f"Bearer {t.config['metrics_token']}"
        elif self.kind == "near-miss":
            h["x-api-key"] = t.key + "x"
        elif self.value:
            h["Authorization"] = self.value
        return h


VERSION = (("anthropic-version", "2023-06-01"),)


def auth(dialect: Dialect = "openai") -> st.SearchStrategy[Auth]:
    """Mostly the ordinary key, the way the dialect's clients send it; sometimes none, a wrong
    one or the admin key."""
    good = [Auth("user")]
    if dialect == "anthropic":
        good = [Auth("user-x-api-key", extra=VERSION), Auth("user", extra=VERSION)]
    odd = [
        Auth("admin"),
        Auth("near-miss"),
        Auth("user", extra=(("content-type", "text/plain"),)),
        Auth("user", extra=(("anthropic-version", "1999-01-01"),)),
        Auth("user", extra=(("anthropic-beta", "nonsense-2099"),)),
    ]
    wrong = [Auth("raw", v) for v in WRONG_KEYS]
    # About four in five requests carry a good key, so that most reach the route's own checks.
    return st.sampled_from(good * (40 // len(good)) + odd + wrong)


def admin_auth() -> st.SearchStrategy[Auth]:
    return st.one_of(st.just(Auth("admin")), auth())


# -- broken bodies --------------------------------------------------------------------------------

CONTENT_TYPES = [
    None,
    "application/json",
    "application/json; charset=latin-1",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/x-ndjson",
]
LITERALS = [
    b"",
    b"null",
    b"[]",
    b"{}",
    b'"model"',
    b"1e400",
    b"-",
    b"NaN",
    b'{"model": Infinity}',
    b'{"model": "chat-vllm", "model": 1}',
    b'{"max_tokens": 1' + b"0" * 400 + b"}",
    b"[" * 70 + b"]" * 70,
    b"[" * 5000,
    b"{" * 3000,
    b'{"a":' * 2000,
    b"\xef\xbb\xbf{}",
    b'{"model": "\xff\xfe"}',
    b'{"model": "\\ud800"}',
    b'{"messages": [{"role": "user", "content": "\\u0000"}], "model": "chat-vllm"}',
    b"\x00" * 16,
]


@st.composite
def broken_bytes(draw: st.DrawFn, body: Any) -> bytes:
    """`body` as JSON, then damaged: cut short, a byte changed, garbage around it; or a known
    troublesome literal; or any bytes."""
    raw = json.dumps(body).encode()
    how = draw(st.sampled_from(["cut", "flip", "wrap", "literal", "binary"]))
    if how == "cut" and raw:
        return raw[: draw(st.integers(0, len(raw) - 1))]
    if how == "flip" and raw:
        at = draw(st.integers(0, len(raw) - 1))
        return raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1 :]
    if how == "wrap":
        return draw(st.binary(max_size=4)) + raw + draw(st.binary(max_size=4))
    if how == "literal":
        return draw(st.sampled_from(LITERALS))
    return draw(st.binary(max_size=64))


content_type = st.sampled_from(CONTENT_TYPES)


# -- paths ----------------------------------------------------------------------------------------


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


# What a URL can carry at all: lone surrogates have no UTF-8 form (the raw-bytes tests send
# broken encodings instead, percent-encoded).
URL_TEXTS = [t for t in TEXTS if _encodable(t)]
url_texts = st.sampled_from(URL_TEXTS)
segment = st.one_of(
    url_texts.map(lambda s: quote(s, safe="")),
    st.sampled_from(
        ["", "..", "%2e%2e", "%ff", "%c0%af", "chat-vllm", "a%2Fb", "x" * 300, "%25", "%u0000"]
    ),
)
query = st.lists(st.tuples(url_texts, url_texts), max_size=3)
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]
