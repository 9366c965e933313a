"""Split SSE bytes the way the openai SDK's decoder reads them: one `data:` payload per event."""

from __future__ import annotations

from typing import Any

import orjson

DONE = "[DONE]"


def payloads(raw: bytes) -> list[str]:
    """Every event's data, in order; asserts the framing is exactly `data: …` + blank line."""
    assert raw.endswith(b"\n\n"), raw[-40:]
    events = raw[:-2].split(b"\n\n")
    out = []
    for event in events:
        assert event.startswith(b"data: "), event
        assert b"\n" not in event, event
        out.append(event[len(b"data: ") :].decode())
    return out


def chunks(raw: bytes) -> list[dict[str, Any]]:
    """The JSON chunks of a finished stream, checking it ends with exactly one [DONE]."""
    items = payloads(raw)
    assert items[-1] == DONE
    assert DONE not in items[:-1]
    parsed = [orjson.loads(item) for item in items[:-1]]
    # Compact JSON, as the SDK and every OpenAI server send it.
    for item, obj in zip(items[:-1], parsed, strict=True):
        assert item == orjson.dumps(obj).decode()
    return parsed
