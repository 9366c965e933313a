"""Stored responses of the Responses API (`store`, `previous_response_id`, `GET /v1/responses`).

Revision: 0002, after 0001.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

MYSQL = ("mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "stored_responses",
        sa.Column(
            "id",
            sa.String(40).with_variant(
                mysql.VARCHAR(40, charset="ascii", collation="ascii_bin"), *MYSQL
            ),
            nullable=False,
        ),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime().with_variant(mysql.DATETIME(fsp=6), *MYSQL), nullable=False
        ),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("input_items", sa.JSON(), nullable=False),
        sa.Column("context", sa.JSON(), nullable=False),
        sa.Column("response", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_stored_responses"),
    )
    op.create_index("ix_stored_responses_user_id", "stored_responses", ["user_id"])
    op.create_index("ix_stored_responses_created_at", "stored_responses", ["created_at"])


def downgrade() -> None:
    op.drop_table("stored_responses")
