"""Sweeps (issue 13): a 24-trial search over learning rate, width and L2 on Fashion-MNIST with
Hyperband against the same sampler and seed without pruning (epochs trained, best objective),
the same Hyperband sweep on one worker against two (wall time), and the controller's own cost
per trial launched (tell + ask + store + publish, measured in-process with simulated trials).
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

import httpx
from sqlalchemy import event
from sqlalchemy.engine import Engine

from benchmarks.service.report import Report
from benchmarks.service.stack import bench_env, running
from tests.helpers import clear_caches, wait_until


def sweep_spec(pruner: str, trials: int, epochs: int, limit: int | None) -> dict[str, Any]:
    dataset: dict[str, Any] = {"name": "fashion_mnist", "validation_split": 0.1}
    if limit:
        dataset["limit"] = limit
    return {
        "name": f"bench-{pruner}",
        "base": {
            "framework": "pytorch",
            "dataset": dataset,
            "model": {"hidden_units": [128]},
            "training": {"epochs": epochs, "batch_size": 64, "seed": 1},
            "optimizer": {"name": "adam"},
        },
        "parameters": {
            "optimizer.learning_rate": {"type": "loguniform", "low": 1e-4, "high": 3e-2},
            "model.hidden_units": {"type": "categorical", "choices": [[32], [64], [128], [256]]},
            "regularization.l2": {"type": "uniform", "low": 0.0, "high": 1e-3},
        },
        "objective": {"metric": "val_accuracy", "mode": "max"},
        "sampler": {"name": "tpe", "seed": 13, "n_startup_trials": 8},
        "pruner": {"name": pruner, "min_epochs": 1, "params": {"reduction_factor": 3}}
        if pruner == "hyperband"
        else {"name": "none"},
        "max_trials": trials,
        "max_parallel": 2,
    }


def run_sweep(client: httpx.Client, spec: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    response = client.post("/v1/sweeps", json=spec)
    response.raise_for_status()
    sweep_id = response.json()["id"]

    def ended() -> dict[str, Any] | None:
        sweep = client.get(f"/v1/sweeps/{sweep_id}").json()
        return sweep if sweep["finished_at"] else None

    sweep = wait_until(ended, 7200, f"sweep {sweep_id}", interval=1.0)
    return {**sweep, "wall_s": time.perf_counter() - started}


def point_this_process_at(env: dict[str, str]) -> None:
    """The in-process measurement talks to the bench database like the services do."""
    for key in ("EPOCHAL_DATABASE_URL", "EPOCHAL_BROKER_URL", "EPOCHAL_HOME"):
        os.environ.pop(key, None)
    os.environ.update(env)
    clear_caches()


def controller_cost(trials: int, epochs: int) -> dict[str, float]:
    """Median ms per trial launched, and per epoch reported, with no training at all."""
    from app.core.db import session_scope
    from app.domain import crud, epoch_rows
    from app.domain.states import JobStatus
    from app.domain.tables import Job
    from app.schemas.sweep import SweepSpec
    from app.services import sweeps
    from app.services.sweep_study import TrialReporter

    body = {**sweep_spec("hyperband", trials, epochs, None), "max_parallel": 1}
    spec = SweepSpec.model_validate_json(json.dumps(body))
    rng, launch_ms, report_ms = random.Random(3), [], []
    launch_sql: list[int] = []
    report_sql: list[int] = []
    with session_scope() as session:
        sweep_id = sweeps.submit(session, spec, None)[0].id  # its trials: claimed below
    for number in range(trials):
        with session_scope() as session:
            job = session.query(Job).filter_by(sweep_id=sweep_id, sweep_trial=number).one()
            job_id = job.id
            crud.claim_job(session, job_id, "bench", 60)
        reporter, quality = TrialReporter(sweep_id, spec, number), rng.random()
        for epoch in range(1, epochs + 1):
            value = quality * (1 - 0.5**epoch)
            with session_scope() as session:
                epoch_rows.record_epoch(session, job_id, 1, epoch, {"val_accuracy": value})
            with counted() as statements:
                started = time.perf_counter()
                pruned = reporter.should_prune(epoch, {"val_accuracy": value}, epochs)
                report_ms.append(1000 * (time.perf_counter() - started))
            report_sql.append(len(statements))
            if pruned:
                break
        with session_scope() as session:
            stop = "pruned" if pruned else "completed"
            crud.finish_job(
                session, job_id, 1, JobStatus.succeeded, stop_reason=stop, reason="bench"
            )
        with counted() as statements:
            started = time.perf_counter()
            sweeps.trial_ended(sweep_id)
            launch_ms.append(1000 * (time.perf_counter() - started))
        launch_sql.append(len(statements))
    return {  # the last top-up launches nothing: left out
        "launch_ms": statistics.median(launch_ms[:-1]),
        "launch_p90_ms": statistics.quantiles(launch_ms[:-1], n=10)[-1],
        "launch_statements": statistics.median(launch_sql[:-1]),
        "report_ms": statistics.median(report_ms),
        "report_statements": statistics.median(report_sql),
    }


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


def bench_sweeps(report: Report, quick: bool) -> None:
    trials, epochs, limit = (6, 3, 6000) if quick else (24, 9, None)
    with bench_env("postgres") as env:
        point_this_process_at(env)
        cost = controller_cost(trials, epochs)
    note = f"median; p90 {cost['launch_p90_ms']:.1f} ms; goal <= 50"
    report.add("sweep_cost_per_trial_ms", cost["launch_ms"], "ms", note)
    report.add("sweep_report_per_epoch_ms", cost["report_ms"], "ms", "report + should_prune")
    results = {}
    for label, pruner, workers in (
        ("hyperband_2w", "hyperband", 2),
        ("none_2w", "none", 2),
        ("hyperband_1w", "hyperband", 1),
    ):
        with bench_env("postgres") as env, running(env, worker=True) as service:
            for extra in range(workers - 1):
                service.start_worker(f"worker-{extra + 2}")
            with service.client() as client:
                results[label] = run_sweep(client, sweep_spec(pruner, trials, epochs, limit))
    for label, sweep in results.items():
        best = sweep["best"]["objective"] if sweep["best"] else float("nan")
        setup = f"{trials} trials x {epochs} epochs, {sweep['counts']}"
        report.add(f"sweep_{label}_epochs", sweep["epochs_spent"], "epochs", setup)
        report.add(f"sweep_{label}_best_val_accuracy", best, "", "best complete trial")
        report.add(f"sweep_{label}_wall_s", sweep["wall_s"], "s", "submit to every trial ended")
    saved = results["hyperband_2w"]["epochs_spent"] / max(1, results["none_2w"]["epochs_spent"])
    report.add("sweep_hyperband_epoch_fraction", saved, "", "goal <= 0.33 of no pruning")
    speedup = results["hyperband_1w"]["wall_s"] / results["hyperband_2w"]["wall_s"]
    report.add("sweep_two_worker_speedup", speedup, "x", "wall time 1 worker / 2 workers")
