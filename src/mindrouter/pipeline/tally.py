"""What the current attempt of a request has produced so far, event by event.

Streamed and non-streamed generation are both read from an engine stream, so one tally serves
both: it counts output chunks (one token each, the charge when a stream breaks off or the
client leaves before the engine's own usage arrives), keeps the text for the audit record and
takes the usage of the final `Done`. A new attempt starts a new tally: what a failed backend
generated before the request moved on is not the caller's.
"""

from __future__ import annotations

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

    def see(self, event: StreamEvent) -> int:
        """Take one event into account; returns the output tokens it is worth (0 or 1)."""
        # Once per generated token: the exact class (events are final) is the cheapest test.
        if type(event) is TextDelta:
            self.produced += 1
            self._pieces.append(event.text)
            return 1
        if type(event) is ReasoningDelta:
            self.produced += 1
            return 1
        if type(event) is ToolCallArgs:
            self.produced += 1
            self._pieces.append(event.fragment)
            return 1
        if type(event) is ToolCallStart:
            self._pieces.append(f"\n[tool call {event.name}] ")
        elif type(event) is Done:
            self.usage = event.usage
        return 0

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
