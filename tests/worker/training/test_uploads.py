"""The worker reads what the API stored: same arrays, classes fixed by the upload, no pickle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.domain import uploads
from app.schemas.job_spec import JobSpec
from worker.training.data import DataError
from worker.training.data.splits import split_and_normalize
from worker.training.data.uploads import load_upload


def stored(tmp_path: Path, task: str = "classification") -> tuple[uploads.Arrays, str]:
    rng = np.random.default_rng(1)
    y = np.arange(50) % 5 if task == "classification" else rng.standard_normal(50)
    raw = uploads.Arrays(rng.standard_normal((50, 3)) * 7, y, rng.standard_normal((8, 3)), y[:8])
    arrays, _ = uploads.validate(raw, task)
    uploads.store(arrays, tmp_path, "ds-1")
    return arrays, "ds-1"


def test_load_upload_returns_the_stored_arrays(tmp_path: Path) -> None:
    arrays, dataset_id = stored(tmp_path)
    raw = load_upload(dataset_id, tmp_path)
    np.testing.assert_array_equal(raw.x, arrays.x)
    np.testing.assert_array_equal(raw.y, arrays.y)
    assert raw.x_test is not None and raw.x_test.shape == (8, 3)
    assert raw.classes == 5 and raw.unit_scale is None


def test_classes_come_from_the_upload_even_with_a_limit(tmp_path: Path) -> None:
    """dataset.limit may cut off the highest label; the model still gets every class."""
    _, dataset_id = stored(tmp_path)
    spec = JobSpec.model_validate(
        {"framework": "pytorch", "dataset": {"id": dataset_id, "limit": 12}}
    )
    raw = load_upload(dataset_id, tmp_path)
    raw.y = np.where(raw.y == 4, 0, raw.y)  # the first 12 labels without class 4
    splits = split_and_normalize(raw, spec)
    assert splits.outputs == 5 and splits.x_val is not None
    assert len(splits.x_train) + len(splits.x_val) == 12
    # unit: divided by the max |x| of the training split
    assert np.abs(splits.x_train).max() == pytest.approx(1.0)


def test_regression_upload_has_one_output(tmp_path: Path) -> None:
    _, dataset_id = stored(tmp_path, "regression")
    spec = JobSpec.model_validate(
        {"framework": "pytorch", "task": "regression", "dataset": {"id": dataset_id}}
    )
    raw = load_upload(dataset_id, tmp_path)
    assert raw.classes is None and raw.y.dtype == np.float32
    assert split_and_normalize(raw, spec).outputs == 1


@pytest.mark.parametrize("dataset_id", ["gone", "../../etc/passwd", ""])
def test_missing_or_odd_ids_are_a_clear_data_error(tmp_path: Path, dataset_id: str) -> None:
    with pytest.raises(DataError, match="deleted|not a data set id"):
        load_upload(dataset_id, tmp_path)


def test_a_pickled_file_in_the_upload_dir_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "uploads"
    folder.mkdir()
    np.savez(folder / "evil.npz", x=np.array([object()], dtype=object), y=np.arange(1))
    with pytest.raises(DataError, match="cannot be read"):
        load_upload("evil", tmp_path)


def stored_tokens(tmp_path: Path) -> uploads.Arrays:
    rng = np.random.default_rng(2)
    x, x_test = rng.integers(0, 40, (30, 6)), rng.integers(0, 50, (5, 6))
    x_test[0, 0] = 49  # the vocabulary counts the test split too
    raw = uploads.Arrays(x, np.arange(30) % 3, x_test, np.arange(5) % 3)
    arrays, summary = uploads.validate(raw, "classification", "tokens")
    assert summary.vocab == 50 and arrays.x.dtype == np.int32
    uploads.store(arrays, tmp_path, "tok-1")
    return arrays


def test_token_ids_load_as_int32_and_are_never_scaled(tmp_path: Path) -> None:
    arrays = stored_tokens(tmp_path)
    spec = JobSpec.model_validate(
        {"framework": "pytorch", "dataset": {"id": "tok-1", "limit": 12}}  # normalize: unit
    )
    raw = load_upload("tok-1", tmp_path)
    assert raw.vocab == 50  # of the whole upload, not of the first 12 samples
    splits = split_and_normalize(raw, spec)
    assert splits.tokens and splits.vocab == 50
    assert splits.x_val is not None and splits.x_test is not None
    assert {a.dtype for a in (splits.x_train, splits.x_val, splits.x_test)} == {np.dtype("int32")}
    together = np.concatenate([splits.x_train, splits.x_val])
    np.testing.assert_array_equal(np.sort(together, axis=0), np.sort(arrays.x[:12], axis=0))
    assert float(splits.scale) == 1.0 and float(splits.shift) == 0.0  # model.onnx: identity


def test_values_are_not_tokens(tmp_path: Path) -> None:
    _, dataset_id = stored(tmp_path)
    spec = JobSpec.model_validate({"framework": "pytorch", "dataset": {"id": dataset_id}})
    splits = split_and_normalize(load_upload(dataset_id, tmp_path), spec)
    assert not splits.tokens and splits.x_train.dtype == np.float32


def test_standard_normalization_of_token_ids_is_a_data_error(tmp_path: Path) -> None:
    stored_tokens(tmp_path)
    spec = JobSpec.model_validate(
        {"framework": "pytorch", "dataset": {"id": "tok-1", "normalize": "standard"}}
    )
    with pytest.raises(DataError, match="normalize standard does not apply to token ids"):
        split_and_normalize(load_upload("tok-1", tmp_path), spec)
