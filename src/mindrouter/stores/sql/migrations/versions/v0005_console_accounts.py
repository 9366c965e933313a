"""Console accounts: local passwords, OpenID Connect subjects and the console's admin flag.

Revision: 0005, after 0004.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

MYSQL = ("mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "console_accounts",
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("password_hash", sa.String(255), nullable=True),
        sa.Column("oidc_subject", sa.String(500), nullable=True),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column(
            "updated_at", sa.DateTime().with_variant(mysql.DATETIME(fsp=6), *MYSQL), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name="fk_console_accounts_user_id_users",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("user_id", name="pk_console_accounts"),
        sa.UniqueConstraint("oidc_subject", name="uq_console_accounts_oidc_subject"),
    )


def downgrade() -> None:
    op.drop_table("console_accounts")
