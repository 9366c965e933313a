"""A backend's drain (`backends.draining`): set by an admin, kept in the database so that every
gateway process and replica stops sending it new requests (within a second, through the catalog
epoch) and a restart keeps it drained until an admin undrains it.

Revision: 0006, after 0005.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("backends") as batch:
        batch.add_column(
            sa.Column("draining", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("backends") as batch:
        batch.drop_column("draining")
