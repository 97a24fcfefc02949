"""Training from a sharded data set (app.shards) in both back-ends: the streaming path trains,
scores its held-out parts by streaming, reports its input wait, and a job killed mid-epoch
resumes at the next sample with the losses and weights of an uninterrupted run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.domain.states import StopReason
from app.shards.index import dataset_prefix
from app.shards.reader import ShardReader
from app.storage.base import Store
from app.storage.directory import DirectoryStore
from tests.shard_data import write_dataset
from tests.worker.training.inprocess import AtStep, KillAtStep, Killed, make_spec, run_spec
from worker.training.backend import Placement, create_backend
from worker.training.callbacks import Callback, Logs, TrainState
from worker.training.data import load_splits, streamed
from worker.training.data.stream import ShardStream

ROWS = [60, 45, 70, 30, 55, 40]  # 300 samples in uneven shards
FRAMEWORKS = [
    pytest.param("pytorch", marks=pytest.mark.torch),
    pytest.param("tensorflow", marks=pytest.mark.tf),
]


@pytest.fixture
def data_store(tmp_path: Path) -> Store:
    store = DirectoryStore(tmp_path / "store")
    write_dataset(store, dataset_prefix("shards-1", "train"), ROWS, x_shape=(6,), classes=3)
    write_dataset(
        store, dataset_prefix("shards-1", "test"), [50, 30], x_shape=(6,), classes=3, seed=1
    )
    return store


def spec_for(framework: str, **training: Any) -> Any:
    return make_spec(
        framework,
        dataset={"id": "shards-1", "validation_split": 0.2, "normalize": "standard"},
        model={"hidden_units": [16], "dropout": 0.3},
        training={"epochs": 3, "batch_size": 16, **training},
    )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_streamed_job_trains_and_scores_its_parts(
    framework: str, data_store: Store, tmp_path: Path
) -> None:
    run = run_spec(spec_for(framework), tmp_path / "job", data_store=data_store)
    assert run.outcome.status == "succeeded", run.outcome
    assert [row["epoch"] for row in run.rows] == [1.0, 2.0, 3.0]
    for row in run.rows:
        assert np.isfinite(row["train_loss"]) and np.isfinite(row["val_loss"])
        assert row["data_wait_seconds"] >= 0
    assert run.outcome.result["evaluated_on"] == "test"
    assert 0 <= run.outcome.result["test_accuracy"] <= 1


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_killed_mid_epoch_twice_resumes_like_an_uninterrupted_run(
    framework: str, data_store: Store, tmp_path: Path
) -> None:
    spec = spec_for(framework, epochs=3).model_copy(update={"checkpoint_every_steps": 4})
    whole = run_spec(spec, tmp_path / "whole", data_store=data_store)
    # 240 training samples in batches of 16: 15 steps an epoch; killed at steps 6 and 23
    # (mid-epoch 1 and 2), each after a checkpoint at 4 and 20: 2 and 3 steps redone.
    for step in (6, 23):
        with pytest.raises(Killed):
            run_spec(spec, tmp_path / "killed", KillAtStep(step), data_store=data_store)
    resumed = run_spec(spec, tmp_path / "killed", data_store=data_store)
    assert resumed.outcome.status == "succeeded"
    assert [row["epoch"] for row in resumed.rows] == [2.0, 3.0]
    keys = ["train_loss", "train_accuracy", "val_loss", "val_accuracy"]
    for row, again in zip(whole.rows[1:], resumed.rows, strict=True):
        assert [row[k] for k in keys] == [again[k] for k in keys]
    for w, v in zip(whole.weights, resumed.weights, strict=True):
        np.testing.assert_array_equal(w, v)


class PreemptAt(AtStep):
    """Asks the epoch to stop (a preemption signal) once global step `step` is done."""

    def act(self, state: TrainState) -> None:
        state.interrupt = StopReason.preempted


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_streamed_job_stopped_mid_epoch_checkpoints_there_and_goes_on(
    framework: str, data_store: Store, tmp_path: Path
) -> None:
    """Between two due checkpoints: the interrupt, seen at the next check (step 32 of 60),
    writes one where it stopped, and the next attempt starts at the sample after it."""
    spec = spec_for(framework, epochs=2, batch_size=4)
    spec = spec.model_copy(update={"checkpoint_every_steps": 1000})
    whole = run_spec(spec, tmp_path / "whole", data_store=data_store)
    stopped = run_spec(spec, tmp_path / "job", PreemptAt(20), data_store=data_store)
    assert stopped.outcome.stop_reason == "preempted" and stopped.rows == []
    assert stopped.state.global_step == 32
    assert [p.name for p in (tmp_path / "job" / "checkpoints").glob("epoch-*")] == [
        "epoch-0000-step-000000032"
    ]
    resumed = run_spec(spec, tmp_path / "job", data_store=data_store)
    assert [row["epoch"] for row in resumed.rows] == [1.0, 2.0]
    assert [r["train_loss"] for r in resumed.rows] == [r["train_loss"] for r in whole.rows]
    for w, v in zip(whole.weights, resumed.weights, strict=True):
        np.testing.assert_array_equal(w, v)


def test_reads_beside_the_training_stream_keep_no_shard(
    data_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The setup's reads (normalization statistics, the sample), evaluation's and a report's
    drop their shards when done: none sits beside the training stream's budget, the only
    reader memory app.domain.stream_memory counts."""
    opened: list[ShardReader] = recorded(monkeypatch, "ShardReader")
    data = streamed.open_streamed(spec_for("pytorch"), data_store)
    assert data is not None
    streamed.streamed_splits(data)
    assert len(list(data.chunks("val", 0, 1))) == 1
    assert len(data.raw_head("test", 5)[0]) == 5
    assert [reader.cache.used for reader in opened] == [0] * len(opened)
    assert len(opened) >= 4  # statistics and sample (or one for both), chunks, report


@pytest.fixture
def streams(monkeypatch: pytest.MonkeyPatch) -> list[ShardStream]:
    """Every training stream the data sets open, in order."""
    return recorded(monkeypatch, "ShardStream")


def recorded(monkeypatch: pytest.MonkeyPatch, name: str) -> list[Any]:
    """Every instance of worker.training.data.streamed's class `name` made from now on, in
    order (the class itself, recording each new one)."""
    opened: list[Any] = []
    base: type[Any] = getattr(streamed, name)

    class Recorded(base):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            opened.append(self)

    monkeypatch.setattr(streamed, name, Recorded)
    return opened


class HeldAfterTraining(Callback):
    """The bytes the training streams cache when training ends, and as each read after it
    (the test pass, the report's rows, model.onnx's check) opens its reader."""

    def __init__(self, streams: list[ShardStream], monkeypatch: pytest.MonkeyPatch) -> None:
        self.streams, self.ended = streams, False
        self.at_end: list[int] = []
        self.at_reads: list[int] = []
        watch = self

        class Reader(ShardReader):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                if watch.ended:
                    watch.at_reads.append(watch.held())

        monkeypatch.setattr(streamed, "ShardReader", Reader)

    def held(self) -> int:
        return sum(stream.cache.used for stream in self.streams)

    def on_train_end(self, state: TrainState, logs: Logs) -> None:
        self.ended = True
        self.at_end.append(self.held())


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_training_stream_keeps_no_shard_once_training_ends(
    framework: str,
    data_store: Store,
    tmp_path: Path,
    streams: list[ShardStream],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After the last epoch the training stream is closed: its shards, which the reader keeps
    cached for the next epoch (all of them here), do not sit beside the report's and the
    export's memory. An attempt with no epoch left opens no stream just to close it."""
    watch = HeldAfterTraining(streams, monkeypatch)
    run = run_spec(spec_for(framework, epochs=2), tmp_path / "job", watch, data_store=data_store)
    assert run.outcome.status == "succeeded", run.outcome
    (stream,) = streams
    assert stream.stats.peak_cache_bytes > 0  # it did cache shards while training
    assert watch.at_end == [0]
    assert len(watch.at_reads) >= 3 and set(watch.at_reads) == {0}
    again = run_spec(spec_for(framework, epochs=2), tmp_path / "job", data_store=data_store)
    assert again.outcome.status == "succeeded" and again.rows == []  # resumed after the end
    assert streams == [stream]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_stopped_epoch_closes_the_training_stream_too(
    framework: str,
    data_store: Store,
    tmp_path: Path,
    streams: list[ShardStream],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An attempt stopped mid-epoch (preempted) closes its stream as one that finished does."""
    watch = HeldAfterTraining(streams, monkeypatch)
    spec = spec_for(framework, epochs=2, batch_size=4)
    spec = spec.model_copy(update={"checkpoint_every_steps": 1000})  # the step hook PreemptAt wraps
    run = run_spec(spec, tmp_path / "job", PreemptAt(20), watch, data_store=data_store)
    assert run.outcome.stop_reason == "preempted" and run.state.global_step == 32
    (stream,) = streams
    assert stream.stats.peak_cache_bytes > 0 and watch.at_end == [0]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_epoch_after_the_end_of_training_opens_a_new_stream(
    framework: str, data_store: Store, streams: list[ShardStream]
) -> None:
    """Nothing trains after end_training today; if something did, it would get a new stream,
    its cache empty, rather than a closed one."""
    spec = spec_for(framework)
    backend = create_backend(spec, load_splits(spec, Path("/nonexistent"), data_store), Placement())
    try:
        state = TrainState(epochs=3, learning_rate=0.1)
        first = backend.train_epoch(state)
        backend.end_training()
        assert [s.cache.used for s in streams] == [0]
        state.epoch = 1
        second = backend.train_epoch(state)
        assert first is not None and second is not None
        assert first.samples == second.samples == 240
        assert len(streams) == 2 and streams[1].cache.used > 0
        assert second.data_cache_misses == first.data_cache_misses > 0  # a cold cache again
    finally:
        backend.close()
    assert [s.cache.used for s in streams] == [0, 0]
