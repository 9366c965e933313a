"""Crash recovery: which gateway process owns each audit record, and the processes' heartbeats.

Revision: 0002. `audit_records.instance` names the process that wrote the record;
`gateway_instances` holds one row per running process with its last heartbeat. A process whose
heartbeat lapsed has its `pending` records closed as `interrupted` by another (see
`stores/sql/instances.py`).
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

MYSQL = ("mysql", "mariadb")


def utc() -> sa.types.TypeEngine[datetime]:
    return sa.DateTime().with_variant(mysql.DATETIME(fsp=6), *MYSQL)


def token(length: int) -> sa.types.TypeEngine[str]:
    return sa.String(length).with_variant(
        mysql.VARCHAR(length, charset="ascii", collation="ascii_bin"), *MYSQL
    )


def upgrade() -> None:
    op.add_column("audit_records", sa.Column("instance", token(32), nullable=True))
    op.create_index("ix_audit_records_instance", "audit_records", ["instance"])
    op.create_table(
        "gateway_instances",
        sa.Column("id", token(32), nullable=False),
        sa.Column("host", sa.String(255), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("started_at", utc(), nullable=False),
        sa.Column("heartbeat_at", utc(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_gateway_instances"),
    )


def downgrade() -> None:
    op.drop_table("gateway_instances")
    op.drop_index("ix_audit_records_instance", "audit_records")
    with op.batch_alter_table("audit_records") as batch:
        batch.drop_column("instance")
