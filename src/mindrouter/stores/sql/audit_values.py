"""The values of an audit row as the writer stores them: a record's start (`start_values`) and
its outcome (`outcome_values`), with every text cut to its column and made storable."""

from __future__ import annotations

from typing import Any

from mindrouter.stores.audit_records import AuditOutcome, AuditStart

_ERROR_TEXT_LIMIT = 8_000


def _storable(value: str | None, limit: int | None = None) -> str | None:
    """`value` as a text column can hold it: at most `limit` characters, and no NUL, which
    PostgreSQL text refuses (the whole batch would fail). A model may well emit one; it is kept
    as U+FFFD, the mark for a character that could not be represented."""
    if value is None:
        return None
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    return value if limit is None or len(value) <= limit else value[:limit]


def start_values(record: AuditStart) -> dict[str, Any]:
    return {
        "uuid": record.uuid,
        "request_id": _storable(record.request_id, 64),
        "created_at": record.created_at,
        "user_id": record.user_id,
        "user_name": record.user_name,
        "key_id": record.key_id,
        "key_prefix": record.key_prefix,
        "model": _storable(record.model, 200),
        "endpoint": _storable(record.endpoint, 200),
        "messages": record.messages,
        "stream": record.stream,
        "client_ip": _storable(record.client_ip, 64),
        "user_agent": _storable(record.user_agent, 500),
        "status": "pending",
        "attempts": 0,
        "purged": False,
        "instance_id": record.instance_id,
    }


def outcome_values(uuid: str, outcome: AuditOutcome) -> dict[str, Any]:
    # Bound parameter names must differ from column names in an UPDATE's SET clause.
    return {
        "b_uuid": uuid,
        "b_status": outcome.status,
        "b_output": _storable(outcome.output),
        "b_input_tokens": outcome.input_tokens,
        "b_output_tokens": outcome.output_tokens,
        "b_error_message": _storable(outcome.error_message, _ERROR_TEXT_LIMIT),
        "b_backend": _storable(outcome.backend, 100),
        "b_attempts": outcome.attempts,
        "b_queued_ms": outcome.queued_ms,
        "b_first_token_ms": outcome.first_token_ms,
        "b_total_ms": outcome.total_ms,
        "b_completed_at": outcome.completed_at,
        "b_period_start": outcome.period_start,
    }
