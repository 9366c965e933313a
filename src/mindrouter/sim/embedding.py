"""Deterministic embedding vectors.

Each input text is hashed (SHAKE-256) into `dim` values in [-1, 1). Values are rounded to float32
before they are returned, so the JSON float form and the base64 form (little-endian float32, as the
openai SDK requests by default) decode to exactly the same numbers.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct


def embedding_vector(text: str, dim: int, normalise: bool = True) -> list[float]:
    raw = hashlib.shake_256(text.encode()).digest(2 * dim)
    values = [v / 32767.5 - 1.0 for v in struct.unpack(f"<{dim}H", raw)]
    if normalise:
        norm = math.sqrt(sum(v * v for v in values)) or 1.0
        values = [v / norm for v in values]
    return to_float32(values)


def to_float32(values: list[float]) -> list[float]:
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


def to_base64(values: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


def truncate(values: list[float], dimensions: int | None, normalise: bool) -> list[float]:
    """Matryoshka-style truncation: keep the first `dimensions` values, renormalised if asked."""
    if dimensions is None or dimensions >= len(values):
        return values
    head = values[:dimensions]
    if normalise:
        norm = math.sqrt(sum(v * v for v in head)) or 1.0
        head = to_float32([v / norm for v in head])
    return head
