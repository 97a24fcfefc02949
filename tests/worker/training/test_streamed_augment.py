"""dataset.augment on a sharded data set: training batches take every step, seeded by sample
id and epoch (the same pixels whichever batch or framework reads them); held-out rows are only
normalized; a job with augmentation trains in both frameworks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.shards.index import dataset_prefix
from app.storage.base import Store
from app.storage.directory import DirectoryStore
from tests.shard_data import write_dataset
from tests.worker.training.inprocess import make_spec, run_spec
from worker.training.data.augment import augment_batch
from worker.training.data.stream import Position
from worker.training.data.streamed import open_streamed

FLIP = {"op": "flip_horizontal", "p": 1.0}
CROP = {"op": "random_crop", "size": 8, "padding": 2}


@pytest.fixture
def images(tmp_path: Path) -> Store:
    store = DirectoryStore(tmp_path / "store")
    write_dataset(store, dataset_prefix("imgs", "train"), [40, 40], x_shape=(8, 8), classes=3)
    return store


def spec_for(framework: str, augment: list[dict[str, object]]) -> object:
    return make_spec(
        framework,
        dataset={"id": "imgs", "validation_split": 0.25, "normalize": "none", "augment": augment},
        model={"hidden_units": [8]},
        training={"epochs": 2, "batch_size": 8},
    )


def test_training_batches_are_augmented_and_held_out_rows_are_not(images: Store) -> None:
    data = open_streamed(spec_for("pytorch", [FLIP]), images)  # type: ignore[arg-type]
    assert data is not None
    try:
        with data.train_stream(1, 0, 1) as stream:
            batch = next(iter(stream.iterate(Position(0, 0), 1)))
        prepared = data.prepare(batch.x, batch.ids, batch.epoch)
        assert np.array_equal(prepared, batch.x[:, :, ::-1])  # p=1: every image mirrored
        x_val, _ = data.head("val", 5)
        raw, _ = data.raw_head("val", 5)
        assert np.array_equal(x_val, raw)  # a random step never touches held-out rows
    finally:
        data.close()


def test_a_sample_is_cropped_the_same_whichever_batch_holds_it(images: Store) -> None:
    data = open_streamed(spec_for("pytorch", [CROP]), images)  # type: ignore[arg-type]
    assert data is not None
    try:
        x, _ = data.raw_head("train", 6)
        ids = np.arange(6)
        whole = data.prepare(x, ids, epoch=3)
        alone = data.prepare(x[4:5], ids[4:5], epoch=3)
        assert np.array_equal(whole[4:5], alone)
        assert not np.array_equal(whole, data.prepare(x, ids, epoch=4))  # a new epoch, new crops
        steps = data.train_steps
        assert np.array_equal(whole, augment_batch(x.astype(np.float32), ids, 3, data.seed, steps))
    finally:
        data.close()


@pytest.mark.parametrize(
    "framework",
    [
        pytest.param("pytorch", marks=pytest.mark.torch),
        pytest.param("tensorflow", marks=pytest.mark.tf),
    ],
)
def test_a_job_with_augmentation_trains(framework: str, images: Store, tmp_path: Path) -> None:
    run = run_spec(spec_for(framework, [CROP, FLIP]), tmp_path / "job", data_store=images)  # type: ignore[arg-type]
    assert run.outcome.status == "succeeded", run.outcome
    assert [row["epoch"] for row in run.rows] == [1.0, 2.0]
