"""Gateway instances and their heartbeats; audit records name the instance that wrote them, so
the records a killed process left `pending` can be found and closed by another.

Revision: 0003, after 0002.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

MYSQL = ("mysql", "mariadb")


def _token(length: int) -> sa.types.TypeEngine[str]:
    return sa.String(length).with_variant(
        mysql.VARCHAR(length, charset="ascii", collation="ascii_bin"), *MYSQL
    )


def _utc() -> sa.types.TypeEngine[datetime]:
    return sa.DateTime().with_variant(mysql.DATETIME(fsp=6), *MYSQL)


def upgrade() -> None:
    op.create_table(
        "instances",
        sa.Column("id", _token(32), nullable=False),
        sa.Column("host", sa.String(200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", _utc(), nullable=False),
        sa.Column("heartbeat_at", _utc(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_instances"),
    )
    op.add_column("audit_records", sa.Column("instance_id", _token(32), nullable=True))
    op.create_index("ix_audit_records_instance_status", "audit_records", ["instance_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_audit_records_instance_status", table_name="audit_records")
    with op.batch_alter_table("audit_records") as batch:
        batch.drop_column("instance_id")
    op.drop_table("instances")
