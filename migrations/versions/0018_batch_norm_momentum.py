"""batch_norm's momentum became a spec field whose default (0.9) is not what every batch norm
used before (Keras' 0.99): each stored job and sweep spec gets the 0.99 it ran with written out,
so a queued job, a resumed one, a sweep's next trial or a rerun of a stored spec keeps its
meaning. Graph nodes get `momentum`, MLP templates with batch norm `batch_norm_momentum` (a
sweep's every MLP base: a trial may turn batch_norm on). Data only, no schema change.

Revision ID: 0018_batch_norm_momentum
Revises: 0017_job_memory_estimate
Create Date: 2026-12-05
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0018_batch_norm_momentum"
down_revision = "0017_job_memory_estimate"
branch_labels = None
depends_on = None

LEGACY = 0.99  # the momentum of every batch norm before the field (a migration is frozen)
TABLES = (("job", False), ("sweep", True))  # (table, whether every MLP dict gets the field)


def _pin(node: Any, every_mlp: bool) -> bool:
    """Write LEGACY into each batch_norm node and MLP template that has no momentum; whether
    anything changed. Walks the whole spec: a sweep's base and its choices hold nodes too."""
    changed = False
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
            continue
        if not isinstance(item, dict):
            continue
        if item.get("op") == "batch_norm" and "momentum" not in item:
            item["momentum"], changed = LEGACY, True
        # an MLP template (a sweep's choice of a whole model may leave its type implied)
        mlp = "batch_norm" in item and item.get("type", "mlp") == "mlp"
        if mlp and (every_mlp or item["batch_norm"] is True) and "batch_norm_momentum" not in item:
            item["batch_norm_momentum"], changed = LEGACY, True
        stack.extend(item.values())
    return changed


def _unpin(node: Any, _every_mlp: bool) -> bool:
    """Drop the fields, which the previous revision's specs refuse (it ran 0.99 whatever)."""
    changed = False
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            # an optimizer's momentum (sgd, rmsprop) is another field and stays
            field = "momentum" if item.get("op") == "batch_norm" else "batch_norm_momentum"
            if field in item and (field == "momentum" or item.get("type", "mlp") == "mlp"):
                del item[field]
                changed = True
            stack.extend(item.values())
    return changed


def _rewrite(fix: Any) -> None:
    conn = op.get_bind()
    for name, every_mlp in TABLES:
        table = sa.table(name, sa.column("id", sa.String), sa.column("spec", sa.JSON))
        # Every spec that has a batch norm, or could get one, names it (stored specs are whole).
        query = sa.select(table.c.id, table.c.spec).where(
            sa.cast(table.c.spec, sa.Text).like("%batch_norm%")
        )
        for row_id, spec in conn.execute(query).all():
            if fix(spec, every_mlp):
                conn.execute(table.update().where(table.c.id == row_id).values(spec=spec))


def upgrade() -> None:
    _rewrite(_pin)


def downgrade() -> None:
    _rewrite(_unpin)
