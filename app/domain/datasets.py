"""Dataset rows: who may see one, which unfinished jobs use it, whether a job's model fits it
(a job's, and every data set a sweep's trials can name)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.domain.keys import Caller
from app.domain.spec_paths import set_path
from app.domain.states import ACTIVE, JobStatus
from app.domain.sweep_space import edge_values
from app.domain.tables import ApiKey, Dataset, DatasetUpload, Job
from app.schemas.augment import IN_MEMORY, augment_problem, augmented_shape
from app.schemas.dataset_spec import model_input
from app.schemas.job_spec import JobSpec
from app.schemas.spec_graph import check_model_for_data
from app.schemas.sweep import SweepSpec

UNFINISHED = (JobStatus.queued, *ACTIVE)


def get_visible(
    session: Session, dataset_id: str, key: Caller, lock: bool = False
) -> Dataset | None:
    """The data set if it exists and the key may use it (its owner, or an admin).

    With lock, the row stays locked until the transaction ends (PostgreSQL; SQLite ignores
    it), so a submit that found it and a delete that removes it cannot interleave.
    """
    query = select(Dataset).where(Dataset.id == dataset_id)
    if not key.is_admin:
        query = query.where(Dataset.owner_id == key.id)
    return session.scalars(query.with_for_update() if lock else query).first()


def list_visible(session: Session, key: Caller, limit: int) -> Sequence[Dataset]:
    """Newest first; a plain key sees its own uploads, an admin all of them."""
    query = select(Dataset).order_by(Dataset.created_at.desc(), Dataset.id).limit(limit)
    if not key.is_admin:
        query = query.where(Dataset.owner_id == key.id)
    return session.scalars(query).all()


def unfinished_jobs_using(session: Session, dataset_id: str) -> list[str]:
    """Ids of queued or running jobs whose spec names this upload."""
    named = Job.spec[("dataset", "id")].as_string() == dataset_id
    query = select(Job.id).where(Job.status.in_(UNFINISHED), named).limit(20)
    return list(session.scalars(query))


def problem_for_spec(session: Session, spec: JobSpec, key: Caller) -> str | None:
    """Why the job cannot use its `dataset.id` (missing, not the caller's, wrong task, model
    does not fit, a normalization that means nothing for it), or None when it can or names a
    built-in data set."""
    dataset_id = spec.dataset.id
    if dataset_id is None:
        return None
    row = get_visible(session, dataset_id, key, lock=True)
    if row is None:
        return f"there is no uploaded data set {dataset_id} for this key (GET /v1/datasets)"
    if (why := not_usable(row, spec.dataset.version)) is not None:
        return why
    if spec.task != row.task:
        return (
            f"task {spec.task} needs a data set uploaded with task {spec.task}; "
            f"{dataset_id} was uploaded for {row.task}"
        )
    if spec.dataset.augment and (why := _augment_problem(row, spec)) is not None:
        return why
    shape = augmented_shape(spec.dataset.augment, tuple(row.shape))  # what the model reads
    x = model_input(spec, shape, row.vocab is not None, row.vocab)
    if x.tokens and spec.dataset.normalize == "standard":
        return (
            f"dataset.normalize standard does not apply to {dataset_id}: it holds token ids, "
            "which are never scaled; leave normalize out or set none"
        )
    try:
        check_model_for_data(spec, x, row.classes or 1)
    except ValueError as exc:
        return str(exc)
    return None


def _augment_problem(row: Dataset, spec: JobSpec) -> str | None:
    """dataset.augment needs images, sizes that fit them, and a data set that streams."""
    steps = spec.dataset.augment
    if (why := augment_problem(steps, tuple(row.shape), row.vocab is not None)) is not None:
        return why
    if row.storage != "shards":
        return IN_MEMORY.format(what=f"{row.id}, stored whole from one upload request,")
    return None


def not_usable(row: Dataset, version: str | None) -> str | None:
    """Why a job cannot train on the data set now: not ready, or not the version named."""
    if row.status == "ingesting":
        return f"data set {row.id} is still being ingested; submit once its status is ready"
    if row.status != "ready":
        return f"data set {row.id} failed to ingest and cannot be used: {row.error}"
    if version is not None and version != row.version:
        held = row.version or "none (it was stored in its upload request)"
        return f"dataset.version {version} does not match data set {row.id}'s version {held}"
    return None


def sweep_problems(session: Session, sweep: SweepSpec, key: Caller) -> list[dict[str, Any]]:
    """problem_for_spec for each trial a parameter naming a data set (`dataset`,
    `dataset.id`) can make: a choice of another key's upload is refused like a base naming
    it. Field errors, at most one a parameter; the space is checked sound first."""
    base, errors = sweep.base.model_dump(mode="json"), []
    for path, dist in sweep.parameters.items():
        if path not in ("dataset", "dataset.id"):
            continue
        for value in edge_values(dist):
            trial = JobSpec.model_validate_json(json.dumps(set_path(base, path, value)))
            if (problem := problem_for_spec(session, trial, key)) is not None:
                msg = f"the value {json.dumps(value)[:80]} names a data set it cannot use: "
                errors.append(
                    {
                        "loc": ("body", "parameters", path),
                        "msg": msg + problem,
                        "type": "value_error",
                    }
                )
                break
    return errors


def lock_owner(session: Session, owner_id: str) -> None:
    """Hold the key's row until this transaction ends, so its quota checks run one at a time:
    FOR NO KEY UPDATE on PostgreSQL (a job's or upload's foreign-key check is not blocked);
    SQLite's BEGIN IMMEDIATE serializes every writer already, and the clause renders as
    nothing there."""
    session.execute(select(ApiKey.id).where(ApiKey.id == owner_id).with_for_update(key_share=True))


def stored_bytes(session: Session, owner_id: str) -> int:
    """What this key stores, in all: its data sets, the resumable uploads it has open (their
    whole size, reserved when opened), and its jobs' artifacts (what each job's directory held
    when its last attempt ended, or the estimate reserved at submit)."""
    uploads = select(func.coalesce(func.sum(Dataset.size_bytes), 0)).where(
        Dataset.owner_id == owner_id
    )
    open_uploads = select(func.coalesce(func.sum(DatasetUpload.total_bytes), 0)).where(
        DatasetUpload.owner_id == owner_id
    )
    artifacts = select(func.coalesce(func.sum(Job.disk_bytes), 0)).where(Job.owner_id == owner_id)
    queries = (uploads, open_uploads, artifacts)
    return sum(int(session.scalar(query) or 0) for query in queries)


def over_quota(session: Session, owner_id: str, adding: int, what: str) -> str | None:
    """Why `adding` more bytes for this key break its storage quota; None when they fit.
    Locks the key's row first: a caller that then stores and commits is atomic."""
    quota = get_settings().storage_quota_bytes
    if quota is None:
        return None
    lock_owner(session, owner_id)
    used = stored_bytes(session, owner_id)
    if used + adding <= quota:
        return None
    return (
        f"this key stores {used} bytes (uploads and job artifacts) and {what} {adding}; the "
        f"quota is {quota} (EPOCHAL_MAX_STORAGE_BYTES_PER_KEY); delete an upload or a "
        "finished job first"
    )
