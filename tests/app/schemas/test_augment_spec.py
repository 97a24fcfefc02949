"""dataset.augment at POST: sizes that do not fit the data, normalize's channels and data that
are no images are 422s naming the problem; the steps split into train-only and the
deterministic ones evaluation and prediction keep (model.onnx repeats them, so none is refused
for that)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

from app.core.config import get_settings
from app.schemas.augment import (
    AugmentStep,
    augment_problem,
    augmented_shape,
    eval_steps,
    split_steps,
)
from app.services.dataset_ingest import run_ingest
from tests.conftest import make_key
from tests.shard_data import image_bytes, write_image_folder

STEPS = TypeAdapter(list[AugmentStep])


@pytest.fixture
def client(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {make_key('augmenter')}"
        yield test_client


def job(augment: list[dict[str, Any]], **dataset: Any) -> dict[str, Any]:
    return {
        "framework": "pytorch",
        "dataset": {"name": "fashion_mnist", **dataset, "augment": augment},
        "model": {"type": "cnn"},
    }


BAD: list[tuple[list[dict[str, Any]], dict[str, Any], str, str]] = [
    ([{"op": "random_crop", "size": 40, "padding": 4}], {}, "dataset",
     "dataset.augment[0] (random_crop): random_crop 40x40 does not fit 28x28 images padded by 4"),
    ([{"op": "resize", "size": 20}, {"op": "center_crop", "size": [24, 20]}], {}, "dataset",
     "dataset.augment[1] (center_crop): center_crop 24x20 does not fit 20x20 images"),
    ([{"op": "normalize", "mean": [0.5, 0.5, 0.5], "std": [0.2, 0.2, 0.2]}], {}, "dataset",
     "normalize has 3 means and stds; the images have 1 channel"),
    ([{"op": "normalize", "mean": [0.5], "std": [0.5, 0.1]}], {}, "dataset.augment.0.normalize",
     "normalize has 1 means but 2 stds"),
    ([{"op": "flip_horizontal"}], {"name": "synthetic"}, "dataset",
     "dataset.augment needs images: samples of shape (H, W) or (H, W, C)"),
    ([{"op": "blur"}], {}, "dataset.augment.0", "'blur'"),
    ([{"op": "flip_horizontal", "p": 2}], {}, "dataset.augment.0.flip_horizontal.p", "1"),
    ([{"op": "resize", "size": 32}, {"op": "center_crop", "size": 24}], {}, "dataset",
     "dataset.augment applies to sharded data sets"),
    ([{"op": "random_crop", "size": 28, "padding": 4}, {"op": "flip_horizontal"}], {}, "dataset",
     "dataset.augment applies to sharded data sets (`epochal datasets add`, or `datasets upload "
     "--resumable`); fashion_mnist is held in memory"),
]  # fmt: skip


def test_augment_that_does_not_fit_is_a_422_naming_it(client: TestClient) -> None:
    for augment, dataset, field, words in BAD:
        response = client.post("/v1/jobs", json=job(augment, **dataset))
        assert response.status_code == 422, (augment, response.text[:300])
        error = response.json()["errors"][0]
        assert error["field"] == field and words in error["msg"], (augment, error)
        assert "Traceback" not in response.text


def test_the_augmented_shape() -> None:
    steps = STEPS.validate_python([{"op": "resize", "size": [32, 36]}])
    assert augmented_shape(steps, (28, 28)) == (32, 36)
    assert augmented_shape([], (5,)) == (5,)  # no steps: any data, as it is


def test_a_data_set_looked_up_later_is_checked_by_its_shape() -> None:
    crop = STEPS.validate_python([{"op": "center_crop", "size": 64}])
    flip = STEPS.validate_python([{"op": "flip_horizontal"}])
    assert augment_problem(flip, (96, 128, 3)) is None
    assert augment_problem(crop, (96, 128, 3)) is None  # model.onnx repeats it at prediction
    assert augment_problem([], (40,), tokens=True) is None
    assert augment_problem(crop, (40,), tokens=True) == (
        "dataset.augment needs images; this data set holds token ids"
    )
    assert augment_problem(crop, (32, 32, 3)) == (
        "dataset.augment[0] (center_crop): center_crop 64x64 does not fit 32x32 images"
    )
    assert "not (12,)" in (augment_problem(crop, (12,)) or "")


def test_train_only_and_deterministic_steps() -> None:
    steps = STEPS.validate_python(
        [
            {"op": "resize", "size": 32},
            {"op": "random_crop", "size": 28, "padding": 2},
            {"op": "flip_horizontal"},
            {"op": "random_crop", "size": 28, "padding": 4},
            {"op": "normalize", "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.2, 0.2]},
        ]
    )
    train, deterministic = split_steps(steps)
    assert [s.op for s in train] == ["random_crop", "flip_horizontal", "random_crop"]
    assert [s.op for s in deterministic] == ["resize", "normalize"]
    kept = [s.model_dump() for s in eval_steps(steps, (40, 48, 3))]
    assert kept == [
        {"op": "resize", "size": 32},
        {"op": "center_crop", "size": [28, 28]},  # the first crop changed the shape
        {"op": "normalize", "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.2, 0.2]},
    ]
    assert eval_steps([], (28, 28)) == []


def test_deterministic_steps_on_a_sharded_image_folder_are_accepted(
    sqlite_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """resize, a shape-changing crop and normalize on an image folder: accepted (model.onnx
    repeats them), and the model is built for the images they make, not the stored ones."""
    from app.main import create_app

    rng = np.random.default_rng(1)
    pixels = [image_bytes(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)) for _ in range(4)]
    folder = write_image_folder(tmp_path / "data" / "pics", {"a": pixels, "b": pixels})
    monkeypatch.setenv("EPOCHAL_DATA_ROOTS", str(tmp_path / "data"))
    get_settings.cache_clear()
    augment = [
        {"op": "resize", "size": 10},
        {"op": "random_crop", "size": 9, "padding": 2},
        {"op": "center_crop", "size": 8},
        {"op": "normalize", "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]},
    ]
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {make_key('augmenter')}"
        added = client.post("/v1/datasets/references", json={"source": str(folder)}).json()
        assert run_ingest(added["id"]) == "ready"
        body = {
            "framework": "pytorch",
            "dataset": {"id": added["id"], "normalize": "unit", "augment": augment},
            "model": {"type": "cnn", "conv_channels": [4], "dense_units": [8]},
        }
        response = client.post("/v1/jobs", json=body)
        assert response.status_code == 201, response.text[:400]
        first = response.json()["model_summary"]["layers"][0]
        assert first["output_shape"][:2] == [8, 8]  # 12x16 -> 10x13 -> 9x9 -> 8x8
