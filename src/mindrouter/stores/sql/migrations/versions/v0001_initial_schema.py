"""Initial schema: groups, users, API keys, backends, models, audit records, usage, auth epoch.

Revision: 0001, the first. Types are spelled out here rather than imported from `schema`, so
that this revision keeps creating the same tables when `schema` moves on.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

MYSQL = ("mysql", "mariadb")


def utc() -> sa.types.TypeEngine[datetime]:
    return sa.DateTime().with_variant(mysql.DATETIME(fsp=6), *MYSQL)


def name(length: int = 100) -> sa.types.TypeEngine[str]:
    return sa.String(length).with_variant(mysql.VARCHAR(length, collation="utf8mb4_bin"), *MYSQL)


def token(length: int) -> sa.types.TypeEngine[str]:
    return sa.String(length).with_variant(
        mysql.VARCHAR(length, charset="ascii", collation="ascii_bin"), *MYSQL
    )


def stamps() -> list[sa.Column[datetime]]:
    return [
        sa.Column("created_at", utc(), nullable=False),
        sa.Column("updated_at", utc(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "groups",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", name(), nullable=False),
        sa.Column("scheduler_weight", sa.Float(), nullable=False),
        sa.Column("token_budget", sa.BigInteger(), nullable=False),
        sa.Column("rpm", sa.Integer(), nullable=False),
        sa.Column("max_concurrent", sa.Integer(), nullable=False),
        sa.Column("budget_period_days", sa.Integer(), nullable=False),
        *stamps(),
        sa.PrimaryKeyConstraint("id", name="pk_groups"),
        sa.UniqueConstraint("name", name="uq_groups_name"),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", name(), nullable=False),
        sa.Column("group_id", sa.Integer(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("scheduler_weight", sa.Float(), nullable=True),
        sa.Column("token_budget", sa.BigInteger(), nullable=True),
        sa.Column("rpm", sa.Integer(), nullable=True),
        sa.Column("max_concurrent", sa.Integer(), nullable=True),
        sa.Column("budget_period_days", sa.Integer(), nullable=True),
        *stamps(),
        sa.PrimaryKeyConstraint("id", name="pk_users"),
        sa.UniqueConstraint("name", name="uq_users_name"),
        sa.ForeignKeyConstraint(
            ["group_id"], ["groups.id"], name="fk_users_group_id_groups", ondelete="RESTRICT"
        ),
    )
    op.create_index("ix_users_group_id", "users", ["group_id"])
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("prefix", token(8), nullable=False),
        sa.Column("digest", token(64), nullable=False),
        sa.Column("secret_hash", sa.String(255), nullable=False),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("name", sa.String(100), nullable=True),
        sa.Column("created_at", utc(), nullable=False),
        sa.Column("expires_at", utc(), nullable=True),
        sa.Column("revoked_at", utc(), nullable=True),
        sa.Column("last_used_at", utc(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.UniqueConstraint("digest", name="uq_api_keys_digest"),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name="fk_api_keys_user_id_users", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_api_keys_user_id", "api_keys", ["user_id"])
    op.create_index("ix_api_keys_prefix", "api_keys", ["prefix"])
    op.create_table(
        "backends",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", name(), nullable=False),
        sa.Column("engine", sa.String(20), nullable=False),
        sa.Column("url", sa.String(500), nullable=False),
        sa.Column("gpu", sa.String(50), nullable=True),
        sa.Column("max_concurrent", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("models", sa.JSON(), nullable=True),
        *stamps(),
        sa.PrimaryKeyConstraint("id", name="pk_backends"),
        sa.UniqueConstraint("name", name="uq_backends_name"),
    )
    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", name(200), nullable=False),
        sa.Column("context_length", sa.Integer(), nullable=False),
        sa.Column("capabilities", sa.JSON(), nullable=False),
        sa.Column("aliases", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        *stamps(),
        sa.PrimaryKeyConstraint("id", name="pk_models"),
        sa.UniqueConstraint("name", name="uq_models_name"),
    )
    _create_audit_records()
    op.create_table(
        "usage",
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("period_start", utc(), nullable=False),
        sa.Column("period_tokens", sa.BigInteger(), nullable=False),
        sa.Column("lifetime_tokens", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", utc(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name="pk_usage"),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name="fk_usage_user_id_users", ondelete="CASCADE"
        ),
    )
    epoch = op.create_table(
        "auth_epoch",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_auth_epoch"),
    )
    op.bulk_insert(epoch, [{"id": 1, "epoch": 0}])


def _create_audit_records() -> None:
    op.create_table(
        "audit_records",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("uuid", token(36), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("created_at", utc(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("user_name", name(), nullable=True),
        sa.Column("key_id", sa.Integer(), nullable=True),
        sa.Column("key_prefix", token(12), nullable=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("endpoint", sa.String(200), nullable=False),
        sa.Column("messages", sa.JSON(), nullable=True),
        sa.Column("stream", sa.Boolean(), nullable=False),
        sa.Column("client_ip", sa.String(64), nullable=True),
        sa.Column("user_agent", sa.String(500), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("output", sa.Text().with_variant(mysql.LONGTEXT(), *MYSQL), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=True),
        sa.Column("output_tokens", sa.Integer(), nullable=True),
        sa.Column("backend", sa.String(100), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("queued_ms", sa.Float(), nullable=True),
        sa.Column("first_token_ms", sa.Float(), nullable=True),
        sa.Column("total_ms", sa.Float(), nullable=True),
        sa.Column("completed_at", utc(), nullable=True),
        sa.Column("purged", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_records"),
        sa.UniqueConstraint("uuid", name="uq_audit_records_uuid"),
    )
    for column in ("created_at", "user_id", "user_name", "key_id", "model"):
        op.create_index(f"ix_audit_records_{column}", "audit_records", [column])


def downgrade() -> None:
    for table in (
        "auth_epoch",
        "usage",
        "audit_records",
        "models",
        "backends",
        "api_keys",
        "users",
        "groups",
    ):
        op.drop_table(table)
