"""Optuna's storage as sweeps use it: its cache of finished trials, plus a snapshot that reads
a study's trials once for one decision (a top-up, an epoch's report) and answers every later
read in that decision from memory.

Optuna re-reads a study's unfinished trials, and each of them on its own, several times per
`tell` and `ask` (each read is six statements: the trial and five loads of its parameters,
values and attributes). Inside one decision nothing that decision reads changes elsewhere: a
top-up holds the sweep's lock (only it tells and asks), and what training processes write
meanwhile (a running trial's epoch values) is not read by the sampler. Writes go to the
database at once, as before, and are applied to the snapshot too, so later reads in the same
decision see them; the next decision reads the database again.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.storages import RDBStorage, _CachedStorage
from optuna.trial import FrozenTrial, TrialState


class SnapshotStorage(_CachedStorage):
    """`_CachedStorage` whose `snapshot(study_id)` serves that study's reads from memory."""

    def __init__(self, backend: RDBStorage) -> None:
        super().__init__(backend)
        self._held = threading.local()  # the study this thread holds a snapshot of
        self._study_ids: dict[str, int] = {}  # a study's id never changes once it is made

    @contextmanager
    def snapshot(self, study_id: int) -> Iterator[None]:
        """Read the study's new and unfinished trials once; serve reads from them until exit."""
        super()._read_trials_from_remote_storage(study_id)
        self._held.study_id = study_id
        try:
            yield
        finally:
            self._held.study_id = None

    def _holds(self, study_id: int) -> bool:
        return getattr(self._held, "study_id", None) == study_id

    def _held_trial(self, trial_id: int) -> FrozenTrial | None:
        """The snapshot's copy of a trial, when this thread holds its study."""
        where = self._trial_id_to_study_id_and_number.get(trial_id)
        if where is None or not self._holds(where[0]):
            return None
        return self._studies[where[0]].trials.get(where[1])

    def _read_trials_from_remote_storage(self, study_id: int) -> None:
        if not self._holds(study_id):
            super()._read_trials_from_remote_storage(study_id)

    def get_study_id_from_name(self, study_name: str) -> int:
        found = self._study_ids.get(study_name)
        if found is None:
            found = self._study_ids[study_name] = super().get_study_id_from_name(study_name)
        return found

    def get_trial(self, trial_id: int) -> FrozenTrial:
        with self._lock:
            held = self._held_trial(trial_id)
        return held if held is not None else super().get_trial(trial_id)

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        changed = super().set_trial_state_values(trial_id, state=state, values=values)
        with self._lock:
            held = self._held_trial(trial_id)
            if changed and held is not None:
                now = datetime.datetime.now()
                held.state = state
                if values is not None:
                    held.values = values
                if state == TrialState.RUNNING and held.datetime_start is None:
                    held.datetime_start = now
                if state.is_finished():
                    held.datetime_complete = now
        return changed

    def set_trial_param(
        self, trial_id: int, param_name: str, param_value_internal: float, distribution: Any
    ) -> None:
        super().set_trial_param(trial_id, param_name, param_value_internal, distribution)
        with self._lock:
            held = self._held_trial(trial_id)
            if held is not None:
                dist: BaseDistribution = distribution
                held.params[param_name] = dist.to_external_repr(param_value_internal)
                held.distributions[param_name] = dist

    def set_trial_intermediate_value(self, trial_id: int, step: int, value: float) -> None:
        super().set_trial_intermediate_value(trial_id, step, value)
        with self._lock:
            held = self._held_trial(trial_id)
            if held is not None:
                held.intermediate_values[step] = value

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        super().set_trial_user_attr(trial_id, key, value)
        with self._lock:
            held = self._held_trial(trial_id)
            if held is not None:
                held.user_attrs[key] = value

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        super().set_trial_system_attr(trial_id, key, value)
        with self._lock:
            held = self._held_trial(trial_id)
            if held is not None:
                held.system_attrs[key] = value
