"""What the stores can hold: the ranges and characters every edge checks before a value is kept.

The admin API and the YAML loader share these, so a value one accepts the other accepts too, and
neither lets the database be the first to object (PostgreSQL refuses a NUL in text and integers
past its column width; the answer would then be an opaque failure instead of a message naming
the field). Pure: no web framework, no ORM.
"""

from __future__ import annotations

from datetime import UTC, datetime

# PostgreSQL (and MariaDB) INTEGER and BIGINT; SQLite holds both.
INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1
# A key may be made valid for up to a century; past that, dates leave what every database holds.
MAX_EXPIRES_DAYS = 36_500
# The range every database's timestamp column holds (MariaDB's DATETIME stops at year 9999).
EARLIEST = datetime(1970, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, tzinfo=UTC)


def int_problem(value: int, low: int, high: int) -> str | None:
    """Why `value` cannot be stored in a column for [low, high], or None."""
    if value < low:
        return f"must be at least {low}, got {value}"
    if value > high:
        return f"must be at most {high}, got {value}"
    return None


def text_problem(value: str) -> str | None:
    if "\x00" in value:
        return "must not contain a NUL character"
    return None


def date_problem(value: datetime) -> str | None:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if not EARLIEST <= aware <= LATEST:
        return f"must be between {EARLIEST.date()} and {LATEST.date()}"
    return None


def as_row_id(text: str) -> int | None:
    """`text` as a row id when it is one (ASCII digits within INTEGER), else None. Unicode
    digits such as '²' pass `str.isdigit` but not `int`; ids past the column cannot exist."""
    if not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= INT4_MAX else None
