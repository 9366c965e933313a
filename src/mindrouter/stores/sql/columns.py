"""Column types that behave the same on SQLite, PostgreSQL and MariaDB.

- UtcDateTime: aware UTC datetimes in, aware UTC datetimes out, stored as naive UTC with
  microseconds everywhere. MariaDB's DATETIME drops fractions unless asked for fsp=6, and the
  usage counters compare period starts for equality, so the precision must survive a round trip.
- Name: case-sensitive on every database (MariaDB's default collations are not), so "Alice" and
  "alice" are the same user nowhere or everywhere, not depending on the deployment.
- Token: ASCII, binary collation, for key prefixes, digests and UUIDs.
- LongText: MariaDB's TEXT holds 64 KiB; message histories and outputs need more.
- BigId: 64-bit keys for the audit table, kept INTEGER on SQLite where only that autoincrements.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, DateTime, Dialect, Integer, String, Text
from sqlalchemy.dialects import mysql
from sqlalchemy.types import TypeDecorator, TypeEngine

MYSQL = ("mysql", "mariadb")


class UtcDateTime(TypeDecorator[datetime]):
    impl = DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in MYSQL:
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime(timezone=False))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database; use an aware UTC datetime")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def name_type(length: int = 100) -> TypeEngine[str]:
    return String(length).with_variant(mysql.VARCHAR(length, collation="utf8mb4_bin"), *MYSQL)


def token_type(length: int) -> TypeEngine[str]:
    return String(length).with_variant(
        mysql.VARCHAR(length, charset="ascii", collation="ascii_bin"), *MYSQL
    )


def long_text() -> TypeEngine[str]:
    return Text().with_variant(mysql.LONGTEXT(), *MYSQL)


def big_id() -> TypeEngine[int]:
    return BigInteger().with_variant(Integer(), "sqlite")
