"""What the current attempt of a request has produced so far, read by read of the engine.

Streamed and non-streamed generation are both read from an engine stream, so one tally serves
both: it counts output chunks (one token each, the charge when a stream breaks off or the
client leaves before the engine's own usage arrives), keeps the text for the audit record and
takes the usage of the final `Done`. A new attempt starts a new tally: what a failed backend
generated before the request moved on is not the caller's.
"""

from __future__ import annotations

from collections.abc import Sequence

from mindrouter.canonical import (
    Done,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallArgs,
    ToolCallStart,
    Usage,
)


class Tally:
    __slots__ = ("_pieces", "produced", "usage")

    def __init__(self) -> None:
        self.produced = 0  # output chunks seen
        self.usage: Usage | None = None  # the engine's, from `Done`
        self._pieces: list[str] = []

    def see(self, events: Sequence[StreamEvent]) -> int:
        """Take the events into account; returns the output tokens they are worth (one a
        chunk)."""
        tokens = 0
        pieces = self._pieces
        for event in events:
            # Once per generated token: the exact class (events are final) is the cheapest test.
            if type(event) is TextDelta:
                tokens += 1
                pieces.append(event.text)
            elif type(event) is ReasoningDelta:
                tokens += 1
            elif type(event) is ToolCallArgs:
                tokens += 1
                pieces.append(event.fragment)
            elif type(event) is ToolCallStart:
                pieces.append(f"\n[tool call {event.name}] ")
            elif type(event) is Done:
                self.usage = event.usage
        self.produced += tokens
        return tokens

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    def used(self, input_estimate: int) -> Usage | None:
        """The engine's usage, or, when it broke off first, one token per chunk relayed with
        the input estimated; None when nothing was produced."""
        if self.usage is not None:
            return self.usage
        if not self.produced:
            return None
        return Usage(input_tokens=input_estimate, output_tokens=self.produced, estimated=True)
