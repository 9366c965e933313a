"""Durable and shared state behind small ports.

`ports` holds the Protocols the pipeline talks to and `records` / `audit_records` the plain data
that crosses them; `sql/` implements them with SQLAlchemy (SQLite, PostgreSQL, MariaDB).
"""
