"""What a streamed job's input costs, in both back-ends: each epoch's row reports the bytes its
training pass read from the store and its shard cache's hits and misses (none for data held in
memory), and a job whose input is the bottleneck says so in its result, once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.schemas.metric_row import INPUT_MEASURES
from app.shards.index import dataset_prefix, read_index
from app.storage.base import Store
from app.storage.directory import DirectoryStore
from tests.shard_data import SlowStore, write_dataset
from tests.worker.training.inprocess import make_spec, run_spec
from tests.worker.training.test_streamed import FRAMEWORKS, ROWS, data_store, spec_for
from worker.training.callbacks import Callback, Logs, TrainState
from worker.training.input_bottleneck import INPUT_BOUND, MB, InputBottleneck

__all__ = ["data_store"]

WIDE = [100] * 12  # shards of ~1.5 MiB: 18 MiB in all, more than a 16 MiB reader can keep


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_second_epoch_reads_nothing_when_the_cache_holds_every_shard(
    framework: str, data_store: Store, tmp_path: Path
) -> None:
    run = run_spec(spec_for(framework, epochs=2), tmp_path / "job", data_store=data_store)
    assert run.outcome.status == "succeeded", run.outcome
    index = read_index(data_store, dataset_prefix("shards-1", "train"))
    trained = 240  # the first 300 - 60 ids; the validation split's are read apart
    touched = [s for s in range(len(ROWS)) if index.starts[s] < trained]
    first, second = run.rows
    # The first epoch fetches each shard its samples lie in, once: the reader keeps them all.
    assert first["data_read_bytes"] == sum(index.shards[s].size for s in touched) > 0
    assert first["data_cache_misses"] == len(touched)
    assert second["data_read_bytes"] == 0 and second["data_cache_misses"] == 0
    assert second["data_cache_hits"] == len(touched)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_reader_smaller_than_the_data_set_misses_in_every_epoch(
    framework: str, tmp_path: Path
) -> None:
    store = DirectoryStore(tmp_path / "store")
    written = write_dataset(
        store, dataset_prefix("wide-1", "train"), WIDE, x_shape=(15360,), dtype=np.uint8, classes=3
    )
    assert written.index.size > 16 * MB
    spec = make_spec(
        framework,
        dataset={"id": "wide-1", "validation_split": 0.0, "stream_ram_mb": 16},
        model={"hidden_units": [8]},
        training={"epochs": 2, "batch_size": 50},
    )
    run = run_spec(spec, tmp_path / "job", data_store=store)
    assert run.outcome.status == "succeeded", run.outcome
    first, second = run.rows
    assert first["data_cache_misses"] == len(WIDE)
    assert first["data_read_bytes"] == written.index.size  # each shard fetched once
    # What the reader kept of the first epoch serves some of the second; the rest is fetched.
    assert second["data_cache_hits"] + second["data_cache_misses"] == len(WIDE)
    assert second["data_cache_misses"] > 0 and second["data_read_bytes"] > 0


@pytest.mark.torch
def test_an_epoch_held_in_memory_has_no_input_measures(tmp_path: Path) -> None:
    run = run_spec(make_spec("pytorch", training={"epochs": 1}), tmp_path / "job")
    assert run.outcome.status == "succeeded", run.outcome
    assert not set(INPUT_MEASURES) & set(run.rows[0])
    warnings = run.outcome.result.get("warnings", [])
    assert not any("input is the bottleneck" in w for w in warnings)


class SlowWhileTraining(Callback):
    """The store answers after `delay` seconds while the job trains: the statistics read when
    the data set is opened, and the final test pass, stay quick."""

    def __init__(self, store: SlowStore, delay: float) -> None:
        self.store, self.delay = store, delay

    def on_train_begin(self, state: TrainState) -> None:
        self.store.delay = self.delay

    def on_train_end(self, state: TrainState, logs: Logs) -> None:
        self.store.delay = 0.0


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_job_waiting_for_its_input_says_so_once(
    framework: str, data_store: Store, tmp_path: Path
) -> None:
    """Each shard takes 3 s to arrive in the first epoch, whose first batch alone waits for
    one: more than a fifth of an epoch whose steps take far less, even on a loaded machine
    (TensorFlow's first epoch also traces its step). The second finds them all cached."""
    slow = SlowStore(data_store, 0.0)
    spec = spec_for(framework, epochs=2)
    spec = spec.model_copy(
        update={"dataset": spec.dataset.model_copy(update={"validation_split": 0.0})}
    )
    run = run_spec(spec, tmp_path / "job", SlowWhileTraining(slow, 3.0), data_store=slow)
    assert run.outcome.status == "succeeded", run.outcome
    first = run.rows[0]
    share = first["data_wait_seconds"] / first["epoch_seconds"]
    assert share > INPUT_BOUND
    (warning,) = run.outcome.result["warnings"]
    assert warning.startswith("input is the bottleneck: epoch 1 waited for its data")
    assert f"({share:.0%}, more than 20%)" in warning
    assert "dataset.stream_ram_mb" in warning and "larger shards" in warning


def slow_logs(wait: float, **more: Any) -> Logs:
    return {"epoch_seconds": 10.0, "data_wait_seconds": wait, **more}


def test_the_warning_names_the_first_slow_epoch_only_and_survives_a_resume() -> None:
    watch, state = InputBottleneck(), TrainState(epochs=5, learning_rate=0.1)
    reads = {"data_read_bytes": 3.0 * MB, "data_cache_hits": 1.0, "data_cache_misses": 4.0}
    for epoch, logs in enumerate(
        [{"epoch_seconds": 10.0}, slow_logs(2.0), slow_logs(5.0, **reads), slow_logs(9.0)], 1
    ):  # held in memory (no wait), 20 % (not more), 50 %, 90 %
        state.epoch = epoch
        watch.on_epoch_end(state, logs)
    (warning,) = watch.warnings
    assert "epoch 3 waited for its data 5.00 s of its 10.00 s (50%, more than 20%)" in warning
    assert "served 1 shard uses and fetched 4 (3.0 MiB read from the store)" in warning
    assert "dataset.stream_ram_mb" in warning
    resumed = InputBottleneck()  # a resumed attempt, from the checkpoint's JSON
    resumed.load_state_dict(json.loads(json.dumps(watch.state_dict())))
    state.epoch = 5
    resumed.on_epoch_end(state, slow_logs(8.0))
    assert resumed.warnings == [warning]
    fresh = InputBottleneck()  # a checkpoint from before the watch existed
    fresh.load_state_dict({})
    assert fresh.warnings == []


def test_a_short_wait_or_one_with_every_shard_cached_is_told_apart() -> None:
    watch, state = InputBottleneck(), TrainState(epochs=3, learning_rate=0.1, epoch=1)
    tiny = {"epoch_seconds": 0.2, "data_wait_seconds": 0.1}  # half of a tiny epoch
    watch.on_epoch_end(state, tiny)
    assert watch.warnings == []
    cached = {"data_read_bytes": 0.0, "data_cache_hits": 6.0, "data_cache_misses": 0.0}
    state.epoch = 2
    watch.on_epoch_end(state, slow_logs(4.0, **cached))
    (warning,) = watch.warnings
    assert "epoch 2" in warning and "the store is not the cause" in warning
    assert "training.batch_size" in warning and "stream_ram_mb" not in warning
