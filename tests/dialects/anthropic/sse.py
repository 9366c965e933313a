"""Reading the encoder's server-sent events back, strictly, and checking them with the SDK."""

from __future__ import annotations

import json
from typing import Any

import pydantic
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from anthropic.types.parsed_message import ParsedMessage
from anthropic.types.shared import ErrorResponse

_EVENT_ADAPTER: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)


def split_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) pairs; fails on anything but `event:` + one `data:` line + blank line."""
    text = raw.decode("utf-8")
    assert text.endswith("\n\n"), "the stream must end with a complete event"
    events = []
    for chunk in text[:-2].split("\n\n"):
        lines = chunk.split("\n")
        assert len(lines) == 2, chunk
        assert lines[0].startswith("event: "), chunk
        assert lines[1].startswith("data: "), chunk
        name = lines[0][len("event: ") :]
        data = json.loads(lines[1][len("data: ") :])
        assert data["type"] == name, chunk
        events.append((name, data))
    return events


def validate_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """Every event parsed with the SDK's strict models; `error` and `ping` by their own shape."""
    events = split_events(raw)
    for name, data in events:
        if name == "error":
            ErrorResponse.model_validate(data)
        elif name == "ping":
            # Not in the SDK's event union: its stream reader skips pings before parsing.
            assert data == {"type": "ping"}
        else:
            parsed = _EVENT_ADAPTER.validate_python(data)
            assert parsed.type == name
    return events


def check_block_order(events: list[tuple[str, dict[str, Any]]]) -> None:
    """Blocks numbered 0, 1, 2… in order, each started, fed and stopped before the next."""
    names = [name for name, _ in events if name != "ping"]
    assert names[0] == "message_start"
    expected = 0
    open_index: int | None = None
    for name, data in events:
        if name == "content_block_start":
            assert open_index is None, "blocks interleave"
            assert data["index"] == expected
            open_index = expected
        elif name == "content_block_delta":
            assert data["index"] == open_index
        elif name == "content_block_stop":
            assert data["index"] == open_index
            open_index = None
            expected += 1
        elif name in ("message_delta", "message_stop", "error"):
            assert open_index is None or name == "error"


def accumulate(raw: bytes) -> ParsedMessage[Any]:
    """The message the SDK's own stream accumulator builds from these bytes."""
    snapshot: ParsedMessage[Any] | None = None
    json_bufs: dict[int, bytes] = {}
    for name, data in validate_events(raw):
        if name in ("ping", "error"):
            continue
        event = _EVENT_ADAPTER.validate_python(data)
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=json_bufs)
    assert snapshot is not None
    return snapshot
