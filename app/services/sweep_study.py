"""Optuna, as a sweep uses it: one study per sweep in epochal's own database (RDBStorage on the
same URL), its sampler and pruner built from the sweep spec, ask-and-tell, and the per-epoch
report that decides pruning. Optuna is imported here and in sweep_storage only, and only when a
sweep needs it.

Optuna's tables sit beside epochal's: `epochal migrate` creates them (or the first sweep
does). Optuna's own schema check is skipped because it reads the shared `alembic_version`
table, which holds epochal's revision; optuna is pinned to a major version whose schema is
stable (v3.2.0.a since Optuna 3.2).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import warnings
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sqlalchemy import make_url

from app.core.config import get_settings
from app.core.db import postgres_connect_args, tune_sqlite
from app.domain.sweep_space import grid_values
from app.schemas.sweep import CategoricalDist, IntDist, LogUniformDist, SweepSpec

if TYPE_CHECKING:
    import optuna

log = logging.getLogger(__name__)
_storages: dict[tuple[int, str], Any] = {}
_lock = threading.Lock()
PRUNED_AT = "pruned_at_epoch"  # a trial's user attribute: a resumed attempt prunes there again


def _optuna() -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def storage(create_tables: bool = False) -> Any:
    """This process's RDBStorage on epochal's database (one engine per process, P39)."""
    url = get_settings().sqlalchemy_url
    key = (os.getpid(), url)
    with _lock:
        found = _storages.get(key)
        if found is not None and not create_tables:
            return found
        optuna = _optuna()
        sqlite = url.startswith("sqlite")
        # PostgreSQL: the timeouts and keepalives of epochal's own connections (RELIABILITY.md
        # §11); and a connection the server dropped is replaced before use.
        options = make_url(url).query.get("options")
        connect = postgres_connect_args(get_settings(), options)
        postgres = {"pool_pre_ping": True, "connect_args": connect}
        made = optuna.storages.RDBStorage(
            url,
            engine_kwargs={"connect_args": {"timeout": 30}} if sqlite else postgres,
            skip_compatibility_check=True,
            skip_table_creation=not create_tables,
        )
        if sqlite:  # WAL, busy timeout, BEGIN IMMEDIATE: as epochal's own connections (P40)
            tune_sqlite(made.engine)
            made.engine.dispose()
        # Optuna wraps an RDBStorage in its cache of finished trials (they never change) on
        # every load_study; one per process keeps it across top-ups, and its snapshot reads
        # the unfinished ones once per decision (app.services.sweep_storage).
        from app.services.sweep_storage import SnapshotStorage

        cached = SnapshotStorage(made)
        _storages[key] = cached
        return cached


def snapshot(study: optuna.Study) -> AbstractContextManager[None]:
    """Within it, the study's trials are read once and later reads come from memory."""
    return study._storage.snapshot(study._study_id)  # type: ignore[attr-defined]


def ensure_tables() -> None:
    """Create Optuna's tables if they are missing (after epochal's migrations ran)."""
    try:
        storage(create_tables=True)
    except Exception:  # two processes creating them at once: the loser finds them made
        log.info("optuna tables were being created elsewhere; retrying once", exc_info=True)
        storage(create_tables=True)


def study_name(sweep_id: str) -> str:
    return f"sweep-{sweep_id}"


def max_epochs(spec: SweepSpec) -> int:
    """The longest a trial can train (training.epochs may itself be a parameter)."""
    dist = spec.parameters.get("training.epochs")
    if isinstance(dist, IntDist):
        return dist.top
    if isinstance(dist, CategoricalDist):
        return max(int(c) for c in dist.choices)
    return spec.base.training.epochs


def _sampler(spec: SweepSpec, trials_so_far: int) -> Any:
    """A sampler seeded for this draw: a fresh object per ask must not repeat the last draw."""
    optuna, sampler = _optuna(), spec.sampler
    seed = None if sampler.seed is None else sampler.seed + trials_so_far
    if sampler.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if sampler.name == "grid":
        space = {p: [encode(v) for v in grid_values(d) or []] for p, d in spec.parameters.items()}
        return optuna.samplers.GridSampler(space, seed=seed)
    return optuna.samplers.TPESampler(
        seed=seed,
        n_startup_trials=sampler.n_startup_trials,
        constant_liar=spec.max_parallel > 1,  # running trials count, so parallel draws differ
        multivariate=True,  # one joint draw per trial: fewer reads of the history, too
    )


def _pruner(spec: SweepSpec) -> Any:
    optuna, pruner = _optuna(), spec.pruner
    params, floor = pruner.params, pruner.min_epochs
    if pruner.name == "median":
        return optuna.pruners.MedianPruner(n_warmup_steps=floor, **params)
    if pruner.name == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=floor, **params)
    if pruner.name == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=floor, max_resource=max_epochs(spec), **params
        )
    return optuna.pruners.NopPruner()


def open_study(sweep_id: str, spec: SweepSpec, trials_so_far: int = 0) -> optuna.Study:
    """The sweep's study (made on first use), with its sampler and pruner."""
    optuna = _optuna()
    sampler, pruner = _sampler(spec, trials_so_far), _pruner(spec)
    try:  # the common case: a load is 2 queries, create_study's failed insert costs more
        return optuna.load_study(
            study_name=study_name(sweep_id), storage=storage(), sampler=sampler, pruner=pruner
        )
    except KeyError:
        pass
    return optuna.create_study(
        study_name=study_name(sweep_id),
        storage=storage(),
        sampler=sampler,
        pruner=pruner,
        direction="maximize" if spec.objective.direction == "max" else "minimize",
        load_if_exists=True,  # made by another process meanwhile
    )


def encode(value: Any) -> str:
    """A categorical choice as Optuna stores it: its JSON text (any JSON value is a choice)."""
    return json.dumps(value, sort_keys=True)


def distributions(spec: SweepSpec) -> dict[str, Any]:
    """Optuna's distribution for each parameter path."""
    dists = _optuna().distributions
    out: dict[str, Any] = {}
    for path, dist in spec.parameters.items():
        if isinstance(dist, CategoricalDist):
            out[path] = dists.CategoricalDistribution([encode(c) for c in dist.choices])
        elif isinstance(dist, IntDist):
            out[path] = dists.IntDistribution(dist.low, dist.top, log=dist.log, step=dist.step)
        else:
            log_scale = isinstance(dist, LogUniformDist)
            out[path] = dists.FloatDistribution(dist.low, dist.high, log=log_scale)
    return out


def decode(spec: SweepSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """Optuna's parameter values as spec values (categorical choices back from JSON)."""
    out = {}
    for path, value in params.items():
        categorical = isinstance(spec.parameters.get(path), CategoricalDist)
        out[path] = json.loads(value) if categorical else value
    return out


def best_of(values: list[float], direction: str) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None
    return max(finite) if direction == "max" else min(finite)


class TrialReporter:
    """Reports a trial's epochs to Optuna and asks its pruner (the training child calls it)."""

    def __init__(self, sweep_id: str, spec: SweepSpec, number: int) -> None:
        self.spec, self.metric = spec, spec.objective.metric
        self.study = open_study(sweep_id, spec)
        self.trial_id = self.study._storage.get_trial_id_from_study_id_trial_number(
            self.study._study_id, number
        )

    def should_prune(self, epoch: int, row: Mapping[str, Any], epochs: int) -> bool:
        """Report this epoch's value once (a replayed epoch is not reported again); prune?"""
        with snapshot(self.study):  # the trials are read once for the report and the pruner
            return self._report(epoch, row, epochs)

    def _report(self, epoch: int, row: Mapping[str, Any], epochs: int) -> bool:
        value = row.get(self.metric)
        storage_ = self.study._storage
        frozen = storage_.get_trial(self.trial_id)
        if frozen.state.is_finished() or value is None:
            return False
        pruned_at = frozen.user_attrs.get(PRUNED_AT)
        if pruned_at is not None and epoch >= pruned_at:
            return True  # decided before this attempt was lost: the history says prune here
        if epoch not in frozen.intermediate_values:
            storage_.set_trial_intermediate_value(self.trial_id, epoch, float(value))
        if epoch < self.spec.pruner.min_epochs or epoch >= epochs:
            return False
        optuna = _optuna()
        prune = bool(optuna.trial.Trial(self.study, self.trial_id).should_prune())
        if prune:
            storage_.set_trial_user_attr(self.trial_id, PRUNED_AT, epoch)
        return prune
