"""Sweeps: submit, list, read (trials, best trial, epochs saved), cancel. Owner-only, like jobs."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError

from app.api.bounded import WorkBound
from app.api.deps import (
    CurrentKey,
    SessionDep,
    check_job_priority,
    check_sweep_datasets,
    check_sweep_fits,
    check_sweep_init,
    owner_filter,
    release_db,
)
from app.api.errors import documented
from app.domain import sweeps as rows
from app.domain.spec_paths import value_at
from app.domain.states import TrialState
from app.domain.sweep_space import space_errors
from app.domain.tables import Job, Sweep
from app.schemas.ids import ID_CHARS, ID_MAX_LENGTH
from app.schemas.stored_spec import stored
from app.schemas.sweep import (
    BestTrial,
    SweepPublic,
    SweepSpec,
    SweepsPublic,
    SweepSummary,
    TrialPublic,
)
from app.services import sweeps as controller
from app.services.publish import publish_new

router = APIRouter(prefix="/sweeps", tags=["sweeps"])


def get_sweep_or_404(
    session: SessionDep,
    key: CurrentKey,
    sweep_id: Annotated[str, Path(max_length=ID_MAX_LENGTH, pattern=ID_CHARS)],
) -> Sweep:
    """The sweep if it exists and the caller may see it; another owner's is a 404 too."""
    sweep = session.get(Sweep, sweep_id)
    if sweep is None or (not key.is_admin and sweep.owner_id != key.id):
        raise HTTPException(status_code=404, detail=f"no sweep {sweep_id}")
    return sweep


SweepDep = Annotated[Sweep, Depends(get_sweep_or_404)]


def summary(sweep: Sweep, best_objective: float | None = None) -> SweepSummary:
    spec = controller.load_spec(sweep)
    return SweepSummary(
        id=sweep.id,
        name=sweep.name,
        status=sweep.status,
        created_at=sweep.created_at,
        finished_at=sweep.finished_at,
        trials_launched=sweep.trials_launched,
        max_trials=controller.trial_limit(spec),
        objective=spec.objective,
        best_objective=best_objective,
        wait_reason=sweep.wait_reason if sweep.finished_at is None else None,
        error=sweep.error,
    )


def _trial(job: Job, spec: SweepSpec, value: float | None) -> TrialPublic:
    return TrialPublic(
        number=int(job.sweep_trial or 0),
        job_id=job.id,
        params={p: value_at(job.spec, p) for p in spec.parameters},
        state=controller.trial_state(job),
        status=job.status,
        stop_reason=job.stop_reason,
        objective=value,
        epochs_run=job.current_epoch,
        epochs=int(stored(job.spec)["training"]["epochs"]),  # a refused trial's, as drawn
    )


def public(session: SessionDep, sweep: Sweep) -> SweepPublic:
    spec = controller.load_spec(sweep)
    jobs = rows.trial_jobs(session, sweep.id)
    objective = spec.objective
    values = rows.objective_by_job(
        session, [j.id for j in jobs], objective.metric, objective.direction
    )
    trials = [_trial(j, spec, values.get(j.id)) for j in jobs]
    counts: dict[str, int] = {}
    for trial in trials:
        counts[trial.state] = counts.get(trial.state, 0) + 1
    complete = [t for t in trials if t.state == TrialState.complete and t.objective is not None]
    pick = max if objective.direction == "max" else min
    best = pick(complete, key=lambda t: t.objective or 0.0) if complete else None
    return SweepPublic(
        **summary(sweep, best.objective if best else None).model_dump(),
        spec=sweep.spec,
        trials=trials,
        counts=counts,
        best=None
        if best is None
        else BestTrial(
            number=best.number,
            job_id=best.job_id,
            params=best.params,
            objective=float(best.objective or 0.0),
            model=f"/v1/jobs/{best.job_id}/artifacts/model",
        ),
        epochs_spent=sum(t.epochs_run for t in trials),
        epochs_full=sum(t.epochs for t in trials),
    )


# Checking a space validates up to ~2,500 specs (RELIABILITY.md §10b): off the event loop, and
# at most this many submits at once per process, so their threads cannot crowd the loop's out;
# one of them per key, so one key's slow bodies never hold every slot.
SUBMITS = WorkBound("sweep submits", 2, 5.0, per_owner=1)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SweepPublic,
    operation_id="create_sweep",
    responses={
        403: documented("a priority over the key's cap, or preemptible: false from a non-admin"),
        404: documented("base.init.from_job names no job of this key"),
        429: documented("this key has EPOCHAL_MAX_OPEN_SWEEPS_PER_KEY unfinished sweeps"),
    },
)
async def create_sweep(session: SessionDep, key: CurrentKey, spec: SweepSpec) -> SweepPublic:
    """Submit a sweep; a space that can make a job the schema rejects is a 422 naming it."""
    body, trials = await SUBMITS.run(partial(_store, session, key, spec), owner=key.id)
    await release_db(session)  # no DB slot held while the broker retries (like a job submit)
    await run_in_threadpool(publish_new, trials)
    return body


def _store(session: SessionDep, key: CurrentKey, spec: SweepSpec) -> tuple[SweepPublic, list[Job]]:
    """The space checked, then the sweep and its first trials, committed: its body, and the
    trials to publish (none while its owner's limits are reached: it waits)."""
    try:
        rows.check_open_sweeps(session, key.id)  # before the costly checks; again at the insert
        if errors := space_errors(spec):
            raise RequestValidationError(errors)
        check_sweep_datasets(session, key, spec)  # the base's upload and every one a choice names
        check_sweep_init(session, key, spec)  # the job the base warm-starts from, and its nodes
        check_sweep_fits(session, key, spec)  # the base, and each parameter's ends on it
        spec = check_job_priority(session, key, spec)  # within the key's cap
        sweep, trials = controller.submit(session, spec, key.id)
    except rows.TooManySweeps as exc:
        raise HTTPException(429, str(exc)) from exc
    return public(session, sweep), trials


@router.get("", response_model=SweepsPublic, operation_id="list_sweeps")
def read_sweeps(
    session: SessionDep,
    key: CurrentKey,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> SweepsPublic:
    """List sweeps, newest first, with cursor pagination."""
    try:
        found, next_cursor = rows.list_sweeps(
            session, limit=limit, cursor=cursor, owner_id=owner_filter(key)
        )
    except ValueError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from exc
    best = best_objectives(session, found)
    return SweepsPublic(items=[summary(s, best.get(s.id)) for s in found], next_cursor=next_cursor)


def best_objectives(session: SessionDep, sweeps: Sequence[Sweep]) -> dict[str, float]:
    """Each sweep's best complete-trial objective: one query for the trials, one per metric."""
    objectives = {s.id: controller.load_spec(s).objective for s in sweeps}
    complete: dict[str, str] = {}  # job id -> sweep id
    for job in rows.trial_outcomes(session, list(objectives)):
        if controller.trial_state(job) == TrialState.complete and job.sweep_id:
            complete[job.id] = job.sweep_id
    best: dict[str, float] = {}
    for aim in {(o.metric, o.direction) for o in objectives.values()}:
        ids = [
            j for j, s in complete.items() if (objectives[s].metric, objectives[s].direction) == aim
        ]
        pick = max if aim[1] == "max" else min
        for job_id, value in rows.objective_by_job(session, ids, *aim).items():
            sweep_id = complete[job_id]
            best[sweep_id] = pick(best.get(sweep_id, value), value)
    return best


@router.get("/{sweep_id}", response_model=SweepPublic, operation_id="get_sweep")
def read_sweep(session: SessionDep, sweep: SweepDep) -> SweepPublic:
    """One sweep: its trials, the best one, epochs spent against full length."""
    return public(session, sweep)


@router.post(
    "/{sweep_id}/cancel",
    response_model=SweepPublic,
    operation_id="cancel_sweep",
    responses={409: documented("the sweep has ended already")},
)
def cancel_sweep(session: SessionDep, sweep: SweepDep) -> SweepPublic:
    """Stop launching trials and cancel the queued and running ones; 409 once it ended."""
    if sweep.finished_at is not None:
        raise HTTPException(status_code=409, detail=f"sweep already {sweep.status}")
    controller.cancel(session, sweep)
    session.refresh(sweep)
    return public(session, sweep)
