"""The scheduler: which queued job a free worker runs, why a job waits, when it preempts.

The database of record decides; a Celery message is only a wake-up for a free slot (claim).
`policy` is the pure ordering (priority, fair share, age); `claim` takes the job in SQL.
"""
