"""The sweeps controller: tells Optuna how ended trials went and queues the next ones.

Driven by events, not a scheduler of its own: a sweep is topped up when it is submitted, when
one of its trial jobs ends (the worker's supervisor records the end and calls
`trial_ended`; a cancel from the API does too) and, as a fallback, by every maintenance
round (`top_up_unfinished`). Under the sweep's lock (app.domain.sweeps.locked) one process
at a time decides: tell Optuna the ended trials, ask for up to max_parallel minus the active
ones, store them as ordinary queued jobs, commit, then send them to the broker like any job.
A trial Optuna handed out whose job was never stored (a crash between the two) is launched
on the next top-up with the same parameters, so none is lost and none doubled.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app.core.db import session_scope
from app.domain import crud
from app.domain import sweeps as rows
from app.domain.admission import Admitted
from app.domain.redact import without_server_paths
from app.domain.spec_paths import apply_params
from app.domain.states import (
    TERMINAL,
    JobStatus,
    StopReason,
    SweepStatus,
    TrialState,
)
from app.domain.sweep_space import grid_size
from app.domain.tables import Job, Sweep, utcnow
from app.schemas.job_spec import JobSpec
from app.schemas.sweep import SweepSpec
from app.services import sweep_study, trial_limits, trial_rows
from app.services.publish import publish_queued

log = logging.getLogger(__name__)
WAIT_RECHECK = timedelta(minutes=1)  # a waiting sweep's top-up at least this often
_tables_ready: set[str] = set()


def trial_state(job: Job) -> TrialState:
    """The trial's state, from its job's status and stop reason."""
    if job.status == JobStatus.queued:
        return TrialState.queued
    if job.status in (JobStatus.running, JobStatus.cancelling):
        return TrialState.running
    if job.status == JobStatus.succeeded:
        pruned = job.stop_reason == StopReason.pruned
        return TrialState.pruned if pruned else TrialState.complete
    return TrialState(job.status)


def load_spec(sweep: Sweep) -> SweepSpec:
    return SweepSpec.model_validate_json(json.dumps(sweep.spec))


def trial_limit(spec: SweepSpec) -> int:
    """max_trials, or fewer when a grid has fewer points."""
    points = grid_size(spec)
    return spec.max_trials if points is None else min(spec.max_trials, points)


def submit(session: Session, spec: SweepSpec, owner_id: str | None) -> tuple[Sweep, list[Job]]:
    """Store the sweep, make its study, store its first trials: the caller publishes those
    (publish_new) once it holds no session (a submit during a broker outage)."""
    from app.core.config import get_settings

    url = get_settings().sqlalchemy_url
    session.commit()  # nothing of ours stays open while Optuna's connection writes (SQLite)
    if url not in _tables_ready:
        sweep_study.ensure_tables()
        _tables_ready.add(url)
    rows.check_open_sweeps(session, owner_id, lock=True)
    sweep = rows.create_sweep(session, spec.name, spec.model_dump(mode="json"), owner_id)
    session.commit()
    return sweep, top_up(session, sweep.id, publish=False)


def top_up(session: Session, sweep_id: str, publish: bool = True) -> list[Job]:
    """Tell Optuna the ended trials; queue new ones up to the limits (published unless
    `publish` is False). The new jobs."""
    launched: list[Job] = []
    with rows.locked(session, sweep_id) as sweep:
        if sweep is None:
            return []
        spec = load_spec(sweep)
        jobs = list(rows.trial_jobs(session, sweep_id))
        ended = [j for j in jobs if j.status in TERMINAL]
        objective = spec.objective
        values = rows.objective_by_job(
            session, [j.id for j in ended], objective.metric, objective.direction
        )
        rows.yield_to_optuna(session)
        study = sweep_study.open_study(sweep_id, spec, trials_so_far=len(jobs))
        count, status = _plan(sweep, spec, jobs)
        if status == SweepStatus.failed and sweep.error is None:
            sweep.error = _failed_trials(spec, jobs)
        with sweep_study.snapshot(study):  # Optuna reads the trials once for tell and ask
            by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
            _tell_ended(study, ended, values, by_number)
            asked = _ask(study, spec, jobs, by_number, count)
        launched, refused = _store_asked(session, sweep, spec, asked)
        active = [j for j in jobs if j.status not in TERMINAL] + launched
        sweep.status, sweep.updated_at = status, utcnow()
        stored = len(jobs) + len(launched) + refused
        sweep.trials_launched, sweep.trials_ended = stored, len(ended)
        if status != SweepStatus.running and not active and sweep.finished_at is None:
            sweep.finished_at = utcnow()
        session.commit()
    for job in launched if publish else ():
        publish_queued(session, job)  # a failed publish leaves it queued for the reconciler
    return launched


def _failed_trials(spec: SweepSpec, jobs: Sequence[Job]) -> str:
    failed = sum(j.status == JobStatus.failed for j in jobs)
    return f"failed trials: {failed}, more than max_failed_trials={spec.max_failed_trials}"


def _tell_ended(study: Any, ended: Sequence[Job], values: dict[str, float], by_number: Any) -> None:
    """Each ended trial's result to Optuna, once (a finished Optuna trial is left alone)."""
    states = sweep_study._optuna().trial.TrialState
    for job in ended:
        trial = by_number.get(job.sweep_trial)
        if trial is None or trial.state.is_finished():
            continue
        state = trial_state(job)
        value = values.get(job.id)
        # Under the sweep's lock nobody else tells, and the state was just read: no re-check.
        if state == TrialState.complete and value is not None:
            study.tell(job.sweep_trial, value)
        elif state == TrialState.pruned:
            study.tell(job.sweep_trial, state=states.PRUNED)
        else:
            study.tell(job.sweep_trial, state=states.FAIL)


def _plan(sweep: Sweep, spec: SweepSpec, jobs: Sequence[Job]) -> tuple[int, str]:
    """How many trials to queue now, and the sweep's status after that."""
    active = sum(j.status not in TERMINAL for j in jobs)
    failed = sum(j.status == JobStatus.failed for j in jobs)
    status = sweep.status
    if status == SweepStatus.running and failed > spec.max_failed_trials:
        status = SweepStatus.failed  # running trials finish; no new ones
    if status != SweepStatus.running:
        return 0, status
    count = max(0, min(spec.max_parallel - active, trial_limit(spec) - len(jobs)))
    if count == 0 and active == 0:
        status = SweepStatus.succeeded
    return count, status


def _ask(
    study: Any, spec: SweepSpec, jobs: Sequence[Job], by_number: Any, count: int
) -> list[tuple[int, dict[str, Any]]]:
    """`count` trials: first any Optuna handed out without a stored job, then new ones."""
    stored = {j.sweep_trial for j in jobs}
    states = sweep_study._optuna().trial.TrialState
    orphans = [
        t for n, t in sorted(by_number.items()) if n not in stored and t.state == states.RUNNING
    ]
    out = [(t.number, sweep_study.decode(spec, t.params)) for t in orphans[:count]]
    for trial in orphans[count:]:  # more than the slots left (the sweep shrank): not run
        study.tell(trial.number, state=states.FAIL, skip_if_finished=True)
    distributions = sweep_study.distributions(spec)
    while len(out) < count:
        trial = study.ask(distributions)
        out.append((trial.number, sweep_study.decode(spec, trial.params)))
    return out


def _store_asked(
    session: Session, sweep: Sweep, spec: SweepSpec, asked: list[tuple[int, dict[str, Any]]]
) -> tuple[list[Job], int]:
    """Store the asked trials: the ones a job submit would refuse as failed, with the reason
    (Optuna is told at the next top-up); of the rest, those within the owner's limits as
    queued jobs. The queued jobs, and how many were refused."""
    admission = trial_limits.Admission(session, sweep.owner_id)
    admitted: list[tuple[int, JobSpec, Admitted]] = []
    refused = 0
    for number, params in asked:
        body = trial_body(spec, number, params)
        found = admission.refusal(body)
        if isinstance(found, str):
            trial_rows.refused(session, sweep, body, number, found)
            refused += 1
        else:
            admitted.append((number, *found))
    # What passes the owner's limits is stored; the rest stay Optuna's, asked and not
    # stored, and are launched by a later top-up with the same parameters.
    trials = [trial for _, _, trial in admitted]
    disks, sweep.wait_reason = trial_limits.fitting(session, sweep.owner_id, trials)
    launched = [
        trial_rows.queued(session, sweep, job_spec, number, disk, trial)
        for (number, job_spec, trial), disk in zip(admitted, disks, strict=False)
    ]
    return launched, refused


def trial_body(spec: SweepSpec, number: int, params: dict[str, Any]) -> dict[str, Any]:
    """The job spec of trial `number` as JSON: the base with its parameters in place."""
    body = apply_params(spec.base.model_dump(mode="json"), params)
    body["name"] = f"{spec.name}-{number}"
    if spec.priority is not None:
        body["priority"] = spec.priority
    return body


def trial_spec(spec: SweepSpec, number: int, params: dict[str, Any]) -> JobSpec:
    """The job spec of trial `number`: the base with its parameters in place."""
    return JobSpec.model_validate_json(json.dumps(trial_body(spec, number, params)))


def cancel(session: Session, sweep: Sweep) -> None:
    """Stop launching; cancel every queued and running trial (they end as cancels do)."""
    with rows.locked(session, sweep.id) as locked:
        if locked is None or locked.status != SweepStatus.running:
            session.commit()
            return
        locked.status, locked.updated_at = SweepStatus.cancelled, utcnow()
        for job in rows.trial_jobs(session, sweep.id):
            if job.status not in TERMINAL:
                crud.request_cancel(session, job)
        session.commit()
    top_up(session, sweep.id)  # queued trials ended at once: tell Optuna, maybe finish


def trial_ended(sweep_id: str) -> None:
    """A trial's job reached a final status: top its sweep up (never raises to the caller)."""
    try:
        with session_scope() as session:
            top_up(session, sweep_id)
    except Exception:  # the maintenance round tops the sweep up later
        log.warning("could not top up sweep %s; maintenance will", sweep_id, exc_info=True)


def needs_top_up(session: Session, sweep: Sweep) -> bool:
    """Whether a trial ended since the last top-up, or a slot is free (one grouped read)."""
    active, ended = rows.trial_counts(session, sweep.id)
    if ended != sweep.trials_ended:
        return True
    if sweep.status != SweepStatus.running:
        return active == 0
    spec = sweep.spec
    if active >= int(spec["max_parallel"]) or sweep.trials_launched >= int(spec["max_trials"]):
        return False
    # Waiting on its key's limits: nothing changes for it until one of the key's jobs ends,
    # or a while has passed (an upload deleted frees storage without any job ending).
    if sweep.wait_reason is None or utcnow() - sweep.updated_at > WAIT_RECHECK:
        return True
    return rows.owner_job_ended_since(session, sweep.owner_id, sweep.updated_at)


def top_up_unfinished(session: Session) -> int:
    """The maintenance fallback: top up every sweep that an event may have missed."""
    done = 0
    for sweep in rows.unfinished_sweeps(session):
        done += _top_up_alone(session, sweep)
    session.commit()
    return done


def _transient(exc: BaseException) -> bool:
    """A database or I/O error, however wrapped (Optuna raises its own error from
    SQLAlchemy's): the next round may succeed, so the sweep is not failed for it."""
    seen: BaseException | None = exc
    for _ in range(8):  # a chain of causes is short; never loop on a cycle
        if seen is None:
            return False
        if isinstance(seen, SQLAlchemyError | OSError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _top_up_alone(session: Session, sweep: Sweep) -> bool:
    """Top one sweep up if it needs it, so that no sweep stops the round for the others: one
    whose top-up raises (a spec this version cannot read, a bug) is failed with the reason
    and no longer topped up; a database error is left to the next round, for this sweep only."""
    sweep_id = sweep.id
    try:
        if not needs_top_up(session, sweep):
            return False
        session.commit()
        top_up(session, sweep_id)
        return True
    except Exception as exc:  # the sweep's own fault, unless transient: never every sweep's
        session.rollback()
        if _transient(exc):
            log.warning("could not top up sweep %s; the next round will", sweep_id, exc_info=True)
            return False
        log.warning("sweep %s failed: it could not be topped up", sweep_id, exc_info=True)
        why = f"it could not be topped up ({type(exc).__name__}: {str(exc)[:300]})"
        rows.fail(session, sweep_id, without_server_paths(why))
        session.commit()
        return False
