"""Whether a sweep's next trials may run, checked as POST /v1/jobs checks a job.

Each trial is admitted as a whole spec, with its owner's caps as they are now (`refusal`): the
schema, the key's priority cap and preemptible, its upload, and the memory and disk estimates.
A space is checked at its edges when the sweep is submitted, but a drawn combination of values
can still make a job no POST would take (a trial of batch 4096 and 8192 units, each end fine
alone), so the trial is refused: stored as failed, with the reason. So is a trial whose graph
no longer fits the base's `init` (a drawn width changes a node it names), and its `init` is
resolved for its own graph as a job's is at submit ("matching": the nodes that fit it).

Then whether the admitted trials fit the owner's limits, counted as a job submit counts them:
the key's queued and running jobs (EPOCHAL_MAX_ACTIVE_JOBS_PER_KEY) and what it stores
(EPOCHAL_MAX_STORAGE_BYTES_PER_KEY), in the transaction that stores the trials, the key's row
locked (app.domain.key_jobs.count_active). A trial that does not fit is not failed: the sweep
waits, and says why (`wait_reason`), until a job ends or files are deleted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.domain import datasets, key_jobs
from app.domain.admission import Admitted, Lookups, admit
from app.domain.keys import caller_of
from app.domain.sweep_space import rejection
from app.domain.tables import ApiKey
from app.domain.warm_start import InitProblem, resolve_init
from app.scheduler.policy import priority_problem
from app.schemas.job_spec import JobSpec

REFUSED = "refused: POST /v1/jobs would not take this trial's job"


class Admission:
    """The checks of a job submit for one owner's trials, its rows read once per top-up."""

    def __init__(self, session: Session, owner_id: str | None) -> None:
        self.session = session
        self.owner = caller_of(session, owner_id) if owner_id is not None else None
        row = session.get(ApiKey, owner_id) if owner_id is not None else None
        self.cap = row.max_priority if row is not None else None
        self.lookups = Lookups(session, self.owner)

    def refusal(self, body: dict[str, Any]) -> tuple[JobSpec, Admitted] | str:
        """The trial's spec and its admission (its model built once: app.domain.admission.
        admit) when a POST of it by its owner would be admitted now; else why not."""
        try:
            spec = JobSpec.model_validate_json(json.dumps(body))
        except ValidationError:
            return f"{REFUSED}: {rejection(body)}"
        why, admitted = self._owner_problem(spec), None
        if why is None:
            admitted = admit(self.session, spec, self.owner, self.lookups)
            why = _field_message(admitted.errors[0]) if admitted.errors else None
        if why is None and spec.init is not None:
            spec, why = self._warm_start(spec)
        if why or admitted is None:
            return f"{REFUSED}: {why}"
        return spec, admitted

    def _warm_start(self, spec: JobSpec) -> tuple[JobSpec, str | None]:
        """The trial's init resolved for its own graph, as a submit resolves a job's (a
        parameter may have changed a node the base took); else why not, naming each node."""
        if self.owner is None:
            return spec, "init: a sweep without a key cannot take another job's weights"
        try:
            return resolve_init(self.session, self.owner, spec), None
        except InitProblem as exc:
            return spec, "; ".join(_field_message(e) for e in exc.errors)

    def _owner_problem(self, spec: JobSpec) -> str | None:
        owner = self.owner
        if owner is None:  # no key, no per-key caps
            return None
        is_admin = owner.is_admin
        why = priority_problem(
            spec.priority, spec.preemptible, is_admin=is_admin, max_priority=self.cap
        )
        return why or datasets.problem_for_spec(self.session, spec, owner)


def _field_message(error: dict[str, Any]) -> str:
    field = ".".join(str(p) for p in error["loc"][1:])
    return f"{field}: {error['msg']}"


def fitting(
    session: Session, owner_id: str | None, admitted: Sequence[Admitted]
) -> tuple[list[int | None], str | None]:
    """The disk each of the first admitted trials that fit reserves (in order), and why the
    next one does not fit (None when all do)."""
    if not admitted:
        return [], None
    if owner_id is None:  # no key, no per-key limits
        return [None] * len(admitted), None
    limit = get_settings().max_active_jobs_per_key
    active = key_jobs.count_active(session, owner_id)  # locks the key's row until the commit
    reserved: list[int | None] = []
    for trial in admitted:
        if limit and active + len(reserved) >= limit:
            return reserved, (
                f"waiting: this key has {limit} queued or running jobs "
                "(EPOCHAL_MAX_ACTIVE_JOBS_PER_KEY); the next trial is queued when one ends"
            )
        disk = trial.disk_bytes
        adding = sum(d or 0 for d in reserved) + (disk or 0)
        if why := datasets.over_quota(session, owner_id, adding, "its next trials' files need"):
            return reserved, f"waiting: {why}"
        reserved.append(disk)
    return reserved, None
