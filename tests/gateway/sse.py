"""Read an SSE response raw, so each chunk can be validated with the SDK's strict models."""

from __future__ import annotations

import json
from typing import Any

import httpx


def post_sse(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> list[str]:
    """The `data:` payloads of an SSE response, in order (including the final "[DONE]")."""
    out: list[str] = []
    with httpx.stream("POST", url, json=body, headers=headers or {}, timeout=30) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                out.append(line[6:])
    return out


def json_chunks(payloads: list[str]) -> list[dict[str, Any]]:
    assert payloads and payloads[-1] == "[DONE]", payloads[-3:]
    return [json.loads(p) for p in payloads[:-1]]
