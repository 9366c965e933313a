"""Fold a canonical event stream into a finished result (for non-streamed replies and tests)."""

from __future__ import annotations

from collections.abc import Iterable

from mindrouter.canonical.content import ToolCall
from mindrouter.canonical.events import (
    Done,
    Finish,
    ReasoningDelta,
    StreamEvent,
    StreamFailed,
    TextDelta,
    ToolCallArgs,
    ToolCallStart,
)
from mindrouter.canonical.response import ChatResult, Choice, Usage


class ChatAssembler:
    """Accumulates events; `result()` gives the ChatResult seen so far."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._text: dict[int, list[str]] = {}
        self._reasoning: dict[int, list[str]] = {}
        self._calls: dict[int, dict[int, tuple[str, str, list[str]]]] = {}
        self._finish: dict[int, Finish] = {}
        self.usage: Usage | None = None
        self.error: StreamFailed | None = None

    def feed(self, event: StreamEvent) -> None:
        if isinstance(event, TextDelta):
            self._text.setdefault(event.choice, []).append(event.text)
        elif isinstance(event, ReasoningDelta):
            self._reasoning.setdefault(event.choice, []).append(event.text)
        elif isinstance(event, ToolCallStart):
            self._calls.setdefault(event.choice, {})[event.index] = (event.id, event.name, [])
        elif isinstance(event, ToolCallArgs):
            call = self._calls.get(event.choice, {}).get(event.index)
            if call is not None:
                call[2].append(event.fragment)
        elif isinstance(event, Finish):
            self._finish[event.choice] = event
        elif isinstance(event, Done):
            self.usage = event.usage
        elif isinstance(event, StreamFailed):
            self.error = event

    def result(self) -> ChatResult:
        seen = set(self._text) | set(self._reasoning) | set(self._calls) | set(self._finish)
        indexes = sorted(seen)
        choices = []
        for i in indexes or [0]:
            fin = self._finish.get(i)
            reasoning = "".join(self._reasoning[i]) if i in self._reasoning else None
            calls = [
                ToolCall(id=cid, name=name, arguments="".join(frags))
                for _, (cid, name, frags) in sorted(self._calls.get(i, {}).items())
            ]
            choices.append(
                Choice(
                    index=i,
                    text="".join(self._text.get(i, [])),
                    reasoning=reasoning,
                    tool_calls=calls,
                    finish_reason=fin.reason if fin else ("error" if self.error else "stop"),
                    stop_sequence=fin.stop_sequence if fin else None,
                )
            )
        return ChatResult(model=self.model, choices=choices, usage=self.usage or Usage())


def assemble(model: str, events: Iterable[StreamEvent]) -> ChatResult:
    asm = ChatAssembler(model)
    for ev in events:
        asm.feed(ev)
    return asm.result()
