"""Alembic migrations, shipped with the package; run them through `stores.sql.migrate`."""
