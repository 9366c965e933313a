"""Connections with database errors translated once, here, into the gateway's error tree.

A unique-constraint violation is the caller's mistake (a name already taken): InvalidRequest with
the caller's message. Anything else from the driver is the gateway's problem: InternalError with
a general message; the details go to the log, not to the client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row
from sqlalchemy.exc import (
    DBAPIError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as SqlTimeoutError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from mindrouter.errors import InternalError, InvalidRequest
from mindrouter.observability.logging import log

# A result row of any shape; the stores read columns by name.
AnyRow = Row[*tuple[Any, ...]]

# What a database failure looks like: SQLAlchemy's errors, and the OSError (connection refused,
# timed out) that some drivers raise unwrapped while connecting.
DATABASE_ERRORS: tuple[type[Exception], ...] = (SQLAlchemyError, OSError)

UNAVAILABLE = "the database is unavailable or failed; the error has been logged"


def unreachable(exc: BaseException | None) -> bool:
    """A failure of the connection rather than of the rows written: retrying row by row would
    only repeat it once per row."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, OSError | OperationalError | InterfaceError | SqlTimeoutError)


def utcnow() -> datetime:
    return datetime.now(UTC)


@asynccontextmanager
async def writing(
    engine: AsyncEngine, conflict: str = "that name is already taken"
) -> AsyncIterator[AsyncConnection]:
    """One transaction, committed on success."""
    try:
        async with engine.begin() as conn:
            yield conn
    except IntegrityError as exc:
        raise InvalidRequest(conflict) from exc
    except DATABASE_ERRORS as exc:
        log.error("database write failed", error=str(exc))
        raise InternalError(UNAVAILABLE) from exc


def read_failed(exc: Exception) -> InternalError:
    """The error a failed read raises, the details logged."""
    log.error("database read failed", error=str(exc))
    return InternalError(UNAVAILABLE)


@asynccontextmanager
async def reading(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    try:
        async with engine.connect() as conn:
            yield conn
    except DATABASE_ERRORS as exc:
        raise read_failed(exc) from exc
