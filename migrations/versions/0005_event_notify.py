"""PostgreSQL tells listeners when a job's events are committed: statement-level triggers on
job_transition and epoch_metric NOTIFY `epochal_events` with each job id they touched (what
app.services.event_push listens to). SQLite has no NOTIFY: nothing changes there.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# (trigger, table, event): one statement-level trigger each, the changed rows as `changed`.
TRIGGERS = (
    ("job_transition_notify", "job_transition", "INSERT"),
    ("epoch_metric_notify_insert", "epoch_metric", "INSERT"),
    # A resumed attempt rewrites an epoch (an upsert): its row is updated, not inserted.
    ("epoch_metric_notify_update", "epoch_metric", "UPDATE"),
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # One notification per job and statement, whatever the number of rows (a COPY of a
    # million rows sends one per job); PostgreSQL delivers them at commit.
    op.execute(
        """
        CREATE FUNCTION epochal_notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('epochal_events', job_id) FROM (SELECT DISTINCT job_id FROM changed) AS jobs;
            RETURN NULL;
        END
        $$
        """
    )
    for name, table, event in TRIGGERS:
        op.execute(
            f"CREATE TRIGGER {name} AFTER {event} ON {table} REFERENCING NEW TABLE AS changed "
            "FOR EACH STATEMENT EXECUTE FUNCTION epochal_notify_events()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, table, _ in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
    op.execute("DROP FUNCTION IF EXISTS epochal_notify_events()")
