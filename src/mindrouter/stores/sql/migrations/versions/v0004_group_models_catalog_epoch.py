"""Model access per group (`groups.models`) and the catalog epoch (row 2 of `auth_epoch`).

`groups.models` is a JSON list of name patterns, NULL for every model. The catalog epoch is
bumped with every change to backends, models or groups, so each gateway process re-reads its
routing catalog within a second.

Revision: 0004, after 0003.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("groups") as batch:
        batch.add_column(sa.Column("models", sa.JSON(none_as_null=True), nullable=True))
    epoch = sa.table("auth_epoch", sa.column("id", sa.Integer), sa.column("epoch", sa.BigInteger))
    op.bulk_insert(epoch, [{"id": 2, "epoch": 0}])


def downgrade() -> None:
    op.execute("DELETE FROM auth_epoch WHERE id = 2")
    with op.batch_alter_table("groups") as batch:
        batch.drop_column("models")
