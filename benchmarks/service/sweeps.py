"""Sweeps: the controller's own cost, in-process against PostgreSQL + Redis with
simulated trials (no training): per trial launched (the top-up after a trial ends: tell Optuna,
ask for the next trial, store it as a job, publish it) and per epoch reported (report the
value, ask the pruner, as the training process does), in ms and in SQL statements. The pruning
benchmark with real training is benchmarks/service/pruning.py.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from benchmarks.service.pruning import example_spec
from benchmarks.service.report import Report
from benchmarks.service.stack import bench_env
from tests.helpers import clear_caches


def point_this_process_at(env: dict[str, str]) -> None:
    """The in-process measurement talks to the bench database like the services do."""
    for key in ("EPOCHAL_DATABASE_URL", "EPOCHAL_BROKER_URL", "EPOCHAL_HOME"):
        os.environ.pop(key, None)
    os.environ.update(env)
    clear_caches()


@contextmanager
def counted() -> Iterator[list[str]]:
    """The SQL statements any engine of this process runs meanwhile (epochal's and Optuna's)."""
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    event.listen(Engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", note)


@contextmanager
def timed(into: list[tuple[float, int]]) -> Iterator[None]:
    """Append (ms, statements) of the block to `into`."""
    with counted() as statements:
        started = time.perf_counter()
        yield
        into.append((1000 * (time.perf_counter() - started), len(statements)))


def simulate_trial(
    sweep_id: str, spec: Any, number: int, quality: float, reports: list[tuple[float, int]]
) -> None:
    """What a worker does with a trial, minus training: claim, epochs reported, finish."""
    from app.core.db import session_scope
    from app.domain import crud, epoch_rows
    from app.domain.states import JobStatus
    from app.domain.tables import Job
    from app.services.sweep_study import TrialReporter

    with session_scope() as session:
        job = session.query(Job).filter_by(sweep_id=sweep_id, sweep_trial=number).one()
        job_id = job.id
        crud.claim_job(session, job_id, "bench", 60)
    reporter, epochs = TrialReporter(sweep_id, spec, number), spec.base.training.epochs
    pruned = False
    for epoch in range(1, epochs + 1):
        row = {"val_accuracy": quality * (1 - 0.5**epoch)}
        with session_scope() as session:
            epoch_rows.record_epoch(session, job_id, 1, epoch, row)
        with timed(reports):
            pruned = reporter.should_prune(epoch, row, epochs)
        if pruned:
            break
    with session_scope() as session:
        stop = "pruned" if pruned else "completed"
        crud.finish_job(session, job_id, 1, JobStatus.succeeded, stop_reason=stop, reason="bench")


def controller_cost(body: dict[str, Any]) -> dict[str, float]:
    """Median ms and statements per trial launched and per epoch reported, one trial at a time."""
    from app.core.db import session_scope
    from app.schemas.sweep import SweepSpec
    from app.services import sweeps

    spec = SweepSpec.model_validate_json(json.dumps({**body, "max_parallel": 1}))
    rng, launches, reports = random.Random(3), [], []
    with session_scope() as session:
        sweep_id = sweeps.submit(session, spec, None)[0].id  # its trials: claimed below
    for number in range(spec.max_trials):
        simulate_trial(sweep_id, spec, number, rng.random(), reports)
        with timed(launches):
            sweeps.trial_ended(sweep_id)
    launched = launches[:-1]  # the last top-up launches nothing
    return {
        "launch_ms": statistics.median(ms for ms, _ in launched),
        "launch_p90_ms": statistics.quantiles([ms for ms, _ in launched], n=10)[-1],
        "launch_statements": statistics.median(n for _, n in launched),
        "report_ms": statistics.median(ms for ms, _ in reports),
        "report_statements": statistics.median(n for _, n in reports),
    }


def bench_sweeps(report: Report, quick: bool) -> None:
    # No training here: the full 24 x 9 even in --quick, with TPE (the default sampler, which
    # reads the whole history at every ask) rather than the example's random sampling.
    body = {**example_spec(quick=False), "sampler": {"name": "tpe", "seed": 13}}
    with bench_env("postgres") as env:
        point_this_process_at(env)
        cost = controller_cost(body)
    note = f"median; p90 {cost['launch_p90_ms']:.1f} ms; goal <= 50"
    report.add("sweep_cost_per_trial_ms", cost["launch_ms"], "ms", note)
    report.add("sweep_statements_per_trial", cost["launch_statements"], "", "epochal + Optuna")
    report.add("sweep_report_per_epoch_ms", cost["report_ms"], "ms", "report + should_prune")
    report.add("sweep_statements_per_epoch", cost["report_statements"], "", "training process")
