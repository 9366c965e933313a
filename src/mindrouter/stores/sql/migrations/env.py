"""Alembic's entry point for the packaged migrations.

Only the online mode is supported, on a connection lent by `stores.sql.migrate` (which holds
the async engine); there is no alembic.ini and no URL to read here.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from mindrouter.stores.sql.schema import metadata


def run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most things in place; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    if context.is_offline_mode():
        raise RuntimeError("offline (SQL script) migrations are not supported")
    connection = context.config.attributes.get("connection")
    if not isinstance(connection, Connection):
        raise RuntimeError("run migrations through mindrouter.stores.sql.migrate")
    run_on(connection)


main()
