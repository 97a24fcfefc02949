"""The snapshot Optuna's storage keeps for one decision (app.services.sweep_storage): what a
top-up or an epoch's report writes inside it reads back from memory exactly as the database
then has it, and a top-up reads Optuna's trials once. Real Optuna on the embedded default."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import event

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import sweeps as rows
from app.schemas.sweep import SweepSpec
from app.services import sweep_study, sweeps
from tests.app.services.test_sweeps import run_trial, sweep_body

HYPERBAND = {"name": "hyperband", "min_epochs": 1, "params": {"reduction_factor": 3}}


def spec_of(**overrides: Any) -> SweepSpec:
    body = sweep_body(sampler={"name": "tpe", "seed": 3, "n_startup_trials": 2}, **overrides)
    return SweepSpec.model_validate_json(json.dumps(body))


def as_stored(trial: Any) -> tuple[Any, ...]:
    """Everything of a trial the samplers and pruners read."""
    return (
        trial.number,
        trial.state,
        trial.values,
        trial.params,
        trial.distributions,
        trial.intermediate_values,
        trial.user_attrs,
        trial.system_attrs,
        trial.datetime_start is None,
        trial.datetime_complete is None,
    )


def fresh_read(study_id: int) -> list[Any]:
    """The study's trials from a storage of its own: nothing cached, read from the database."""
    optuna = sweep_study._optuna()
    other = optuna.storages.RDBStorage(
        get_settings().sqlalchemy_url, skip_compatibility_check=True, skip_table_creation=True
    )
    try:
        return other.get_all_trials(study_id)
    finally:
        other.engine.dispose()


def test_writes_inside_a_snapshot_read_back_as_the_database_has_them(
    sqlite_env: dict[str, str],
) -> None:
    spec = spec_of(pruner=HYPERBAND)
    states = sweep_study._optuna().trial.TrialState
    sweep_study.ensure_tables()
    study = sweep_study.open_study("snapshot", spec)
    dists = sweep_study.distributions(spec)
    with sweep_study.snapshot(study):
        for _ in range(3):
            study.ask(dists)
    for number, accuracy in enumerate((0.4, 0.6, 0.5)):  # epochs, as training processes do
        reporter = sweep_study.TrialReporter("snapshot", spec, number)
        for epoch in (1, 2, 3):
            reporter.should_prune(epoch, {"val_accuracy": accuracy * epoch / 3}, 4)
    with sweep_study.snapshot(study):
        study.tell(0, 0.4)
        study.tell(1, state=states.PRUNED)
        asked = study.ask(dists)
        seen = [as_stored(t) for t in study.get_trials(deepcopy=False)]
    stored = [as_stored(t) for t in fresh_read(study._study_id)]
    assert seen == stored
    assert [s[1] for s in seen] == [states.COMPLETE, states.PRUNED, states.RUNNING, states.RUNNING]
    assert seen[1][2] == [0.6] and seen[2][5] == {1: 0.5 / 3, 2: 1.0 / 3, 3: 0.5}
    assert set(asked.params) == set(dists)


def test_a_top_up_reads_the_trials_once(sqlite_env: dict[str, str]) -> None:
    spec = spec_of(pruner=HYPERBAND, max_trials=8)
    with session_scope() as session:
        sweep_id = sweeps.submit(session, spec, None)[0].id
    engine = sweep_study.storage()._backend.engine
    reads: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "FROM trial_params" in statement:  # one per read of trials (a batch or one trial)
            reads.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        for number in range(6):
            with session_scope() as session:
                job_id = rows.trial_jobs(session, sweep_id)[number].id
            run_trial(job_id, 2, 0.1 * number)
            reads.clear()
            with session_scope() as session:
                assert len(sweeps.top_up(session, sweep_id)) == 1
            assert len(reads) == 1, reads
    finally:
        event.remove(engine, "before_cursor_execute", count)
