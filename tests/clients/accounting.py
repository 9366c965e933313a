"""What the gateway recorded and charged for a client's exchange, against the engine's counts."""

from __future__ import annotations

import time
from typing import Any

from mindrouter.sim.engine import RequestRecord
from tests.clients.stack import Stack


def check_accounting(
    stack: Stack, user: str, key: str, engine: str, mark: int
) -> tuple[list[RequestRecord], list[dict[str, Any]]]:
    """Every engine request since `mark` has one finished audit record of `user`, in order, with
    the engine's token counts; the user's usage counters hold their sum. Returns both lists."""
    records = stack.engine_records(engine, mark)
    assert records, "the engine received no request"
    audit = stack.audit(user, len(records))
    assert len(audit) == len(records), (audit, records)
    for entry, record in zip(audit, records, strict=True):
        assert entry["status"] == "ok", entry
        assert entry["backend"] == f"{engine}-1"
        assert (entry["input_tokens"], entry["output_tokens"]) == (
            record.prompt_tokens,
            record.completion_tokens,
        )
    # Charged as each request closes, which may trail the client's exit by a moment.
    total = sum(r.prompt_tokens + r.completion_tokens for r in records)
    deadline = time.monotonic() + 20
    while (charged := stack.lifetime_tokens(key)) != total and time.monotonic() < deadline:
        time.sleep(0.1)
    assert charged == total
    return records, audit


def engine_totals(records: list[RequestRecord]) -> tuple[int, int]:
    return sum(r.prompt_tokens for r in records), sum(r.completion_tokens for r in records)
