"""Messages and their content parts: what was said, by whom, with which images and tool calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(slots=True)
class TextPart:
    text: str


@dataclass(slots=True)
class ImagePart:
    """An image given either by URL (http(s) or data:) or as inline bytes with a media type."""

    url: str | None = None
    data: bytes | None = None
    media_type: str | None = None
    detail: str | None = None

    def as_data_url(self) -> str | None:
        """The image as a URL: the given one, or a data: URL built from inline bytes."""
        if self.url is not None:
            return self.url
        if self.data is None:
            return None
        import base64

        mt = self.media_type or sniff_image_type(self.data)
        return f"data:{mt};base64,{base64.b64encode(self.data).decode('ascii')}"

    def inline(self) -> tuple[bytes, str] | None:
        """The image bytes and media type, decoding a base64 data: URL; None for remote URLs."""
        if self.data is not None:
            return self.data, self.media_type or sniff_image_type(self.data)
        if self.url is not None and self.url.startswith("data:"):
            import base64
            import binascii

            header, _, payload = self.url.partition(",")
            media = header[5:].split(";", 1)[0] or None
            try:
                raw = base64.b64decode(payload, validate=False)
            except (binascii.Error, ValueError):
                return None
            return raw, media or sniff_image_type(raw)
        return None


Part = TextPart | ImagePart


@dataclass(slots=True)
class ToolCall:
    """A call the assistant made. `arguments` is JSON text exactly as the model produced it."""

    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class Message:
    role: Role
    content: list[Part] = field(default_factory=list)
    # Assistant turns: reasoning replayed by the client, and the calls the assistant made.
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    # Tool results: which call this answers, the tool's name where known, and whether it failed.
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False

    def text(self) -> str:
        """All text parts joined; images are left out."""
        parts = self.content
        if len(parts) == 1 and isinstance(parts[0], TextPart):
            return parts[0].text
        return "".join(p.text for p in parts if isinstance(p, TextPart))

    def images(self) -> list[ImagePart]:
        return [p for p in self.content if isinstance(p, ImagePart)]


def text_message(role: Role, text: str) -> Message:
    return Message(role=role, content=[TextPart(text)])


_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def sniff_image_type(data: bytes) -> str:
    """The media type from the first bytes; PNG when unknown (the most common upload)."""
    for magic, media in _MAGIC:
        if data.startswith(magic):
            return media
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "image/png"
