"""Hyperband's epoch fraction without the luck of one draw: Optuna's HyperbandPruner puts each
trial in a bracket by a hash of the study's name (the sweep's random id) and the trial's number,
so one sweep's saving depends on how many trials its id sends to the bracket that never prunes.
This replays the validation curves a sweep without pruning measured through the same pruner,
in memory, for many study names: each trial starts in trial-number order when one of
`max_parallel` slots frees, advances one epoch per time unit, and stops when the pruner says so.
"""

from __future__ import annotations

import statistics
import uuid
from typing import Any


def replay_once(curves: list[list[float]], pruner: dict[str, Any], parallel: int) -> int:
    """Epochs trained when the curves meet Hyperband under one random study name."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    epochs = len(curves[0])
    study = optuna.create_study(
        study_name=f"sweep-{uuid.uuid4()}",
        direction="maximize",
        pruner=optuna.pruners.HyperbandPruner(
            min_resource=pruner["min_epochs"], max_resource=epochs, **pruner["params"]
        ),
    )
    waiting, active, spent = list(range(len(curves))), [], 0
    while waiting or active:
        while waiting and len(active) < parallel:  # [epochs done, trial number, Optuna trial]
            active.append([0, waiting.pop(0), study.ask()])
        slot = min(active, key=lambda a: (a[0], a[1]))  # the one furthest behind moves next
        slot[0] += 1
        spent += 1
        epoch, number, trial = slot
        trial.report(curves[number][epoch - 1], epoch)
        if epoch >= epochs:
            study.tell(trial, max(curves[number]))
        elif epoch >= pruner["min_epochs"] and trial.should_prune():
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            continue
        active.remove(slot)
    return spent


def replayed_fraction(
    curves: list[list[float]], pruner: dict[str, Any], parallel: int, draws: int = 200
) -> dict[str, float]:
    """Mean, p10 and p90 of epochs trained / epochs of every trial trained in full."""
    full = sum(len(c) for c in curves)
    fractions = sorted(replay_once(curves, pruner, parallel) / full for _ in range(draws))
    tenth = max(1, draws // 10)
    return {
        "mean": statistics.mean(fractions),
        "p10": fractions[tenth - 1],
        "p90": fractions[-tenth],
    }
