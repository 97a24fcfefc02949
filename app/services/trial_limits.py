"""Whether a sweep's next trials fit its owner's limits, counted as a job submit counts them:
the key's queued and running jobs (EPOCHAL_MAX_ACTIVE_JOBS_PER_KEY) and what it stores
(EPOCHAL_MAX_STORAGE_BYTES_PER_KEY), in the transaction that stores the trials, the key's row
locked (app.domain.crud.count_active). A trial that does not fit is not failed: the sweep
waits, and says why (`wait_reason`), until a job ends or files are deleted.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.domain import crud, datasets
from app.domain.admission import disk_estimate
from app.domain.keys import caller_of
from app.schemas.job_spec import JobSpec


def fitting(
    session: Session, owner_id: str | None, specs: Sequence[JobSpec]
) -> tuple[list[int | None], str | None]:
    """The disk each of the first trials that fit reserves (in order), and why the next one
    does not fit (None when all do)."""
    if not specs:
        return [], None
    if owner_id is None:  # no key, no per-key limits
        return [None] * len(specs), None
    owner = caller_of(session, owner_id)
    limit = get_settings().max_active_jobs_per_key
    active = crud.count_active(session, owner_id)  # locks the key's row until the commit
    reserved: list[int | None] = []
    for spec in specs:
        if limit and active + len(reserved) >= limit:
            return reserved, (
                f"waiting: this key has {limit} queued or running jobs "
                "(EPOCHAL_MAX_ACTIVE_JOBS_PER_KEY); the next trial is queued when one ends"
            )
        disk = disk_estimate(session, spec, owner)
        adding = sum(d or 0 for d in reserved) + (disk or 0)
        if why := datasets.over_quota(session, owner_id, adding, "its next trials' files need"):
            return reserved, f"waiting: {why}"
        reserved.append(disk)
    return reserved, None
