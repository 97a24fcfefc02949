"""model.onnx of a job trained on an image folder with dataset.augment: it takes the images
as stored (pixels 0..255 at the data set's size) and repeats resize, the centre crops and
normalize itself, so ONNX Runtime on raw images (decoded as `epochal predict JOB a.png` does,
served as /predict serves them) equals the framework's model on the rows evaluation prepares;
the random steps stay out of it. Real ingest, real training, real ONNX Runtime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.domain.job_files import CARD_FILE, ONNX_FILE, JobFiles
from app.schemas.augment import eval_steps
from app.services.predictions import open_model
from app.shards.index import dataset_prefix
from app.shards.ingest import ingest_file
from app.storage.directory import DirectoryStore
from epochal_client.predict_images import image_rows
from tests.shard_data import image_bytes, write_image_folder
from tests.worker.training.inprocess import EMPTY_DATA_DIR, make_spec
from worker.child.train_attempt import run_attempt
from worker.training.backend import Placement, create_backend
from worker.training.callbacks import TrainState
from worker.training.data import load_splits
from worker.training.data.augment import augment_batch
from worker.training.data.streamed import StreamedData
from worker.training.onnx_export import run_onnx

STORED = (12, 16, 3)  # every image of the folder: ingest keeps this size
AUGMENT: list[dict[str, Any]] = [
    {"op": "resize", "size": 10},  # 12 x 16 -> 10 x 13
    {"op": "random_crop", "size": [9, 12], "padding": 1},  # evaluation: its centre crop
    {"op": "flip_horizontal"},
    {"op": "center_crop", "size": 8},
    {"op": "normalize", "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3]},
]
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[DirectoryStore, list[Path]]:
    """An image folder of three classes of PNGs, ingested into a store as data set `pics`."""
    rng = np.random.default_rng(3)
    root = tmp_path_factory.mktemp("folder")
    images = {
        name: [image_bytes(rng.integers(0, 256, STORED, dtype=np.uint8)) for _ in range(12)]
        for name in ("ant", "bee", "cow")
    }
    pics = write_image_folder(root / "pics", images)
    store = DirectoryStore(root / "store")
    index = ingest_file(store, dataset_prefix("pics", "train"), pics, "classification")
    assert index.schema.x_shape == STORED and index.rows == 36
    return store, sorted(pics.rglob("*.png"))


def spec_for(framework: str) -> Any:
    dataset = {"id": "pics", "validation_split": 0.25, "normalize": "unit", "augment": AUGMENT}
    model = {"type": "cnn", "conv_channels": [4], "kernel_size": 3, "dense_units": [8]}
    training = {"epochs": 2, "batch_size": 8}
    return make_spec(framework, dataset=dataset, model=model, training=training)


@pytest.mark.parametrize(
    "framework",
    [
        pytest.param("pytorch", marks=pytest.mark.torch),
        pytest.param("tensorflow", marks=pytest.mark.tf),
    ],
)
def test_model_onnx_on_raw_images_equals_the_framework_on_prepared_ones(
    framework: str, folder: tuple[DirectoryStore, list[Path]], tmp_path: Path
) -> None:
    store, files = folder
    spec = spec_for(framework)
    splits = load_splits(spec, EMPTY_DATA_DIR, store)
    data = splits.stream
    assert isinstance(data, StreamedData)
    assert splits.input_shape == (8, 8, 3) and splits.raw_shape == STORED
    backend = create_backend(spec, splits, Placement())
    try:
        state = TrainState(epochs=2, learning_rate=spec.optimizer.learning_rate)
        outcome = run_attempt(spec, tmp_path, backend, splits, state, [], job_id=None)
        assert outcome.status == "succeeded", outcome.error
        model_dir = JobFiles(tmp_path).model_dir
        card = json.loads((model_dir / CARD_FILE).read_text())
        assert card["input"]["shape"] == [None, *STORED]
        assert card["classes"] == ["ant", "bee", "cow"]  # the folders' names, from the index
        ops = [step["op"] for step in card["preprocess"]]
        assert ops == ["resize", "center_crop", "center_crop", "normalize"]
        assert card["preprocess"][1]["size"] == [9, 12]  # the random crop's stand-in
        raw = image_rows(files, card["input"]["shape"][1:])  # as `epochal predict` reads them
        expected = backend.predict(data.held_out(raw))
        x_val, _ = next(data.chunks("val", 0, 1))  # what validation scores: the same steps
        raw_val, _ = data.raw_head("val", len(x_val))
        assert x_val.shape[1:] == (8, 8, 3) and np.array_equal(x_val, data.held_out(raw_val))
    finally:
        backend.close()
    onnx_bytes = (model_dir / ONNX_FILE).read_bytes()
    got = run_onnx(onnx_bytes, raw)
    assert got.shape == (len(files), 3)
    assert float(np.max(np.abs(got - expected))) <= TOLERANCE
    assert outcome.result is not None
    assert outcome.result["export"]["onnx"]["max_abs_diff"] <= TOLERANCE
    served = open_model(model_dir / ONNX_FILE, model_dir / CARD_FILE, threads=1)
    assert served.row_shape == STORED
    answer = served.predict(raw)  # what /predict answers for these rows
    assert answer["predictions"] == [card["classes"][i] for i in expected.argmax(axis=1)]
    # The random steps stay out: the prepared rows are the deterministic steps alone.
    kept = eval_steps(spec.dataset.augment, STORED)
    normalized = (raw - data.shift) / data.scale
    assert np.array_equal(data.held_out(raw), augment_batch(normalized, np.arange(36), 0, 0, kept))
