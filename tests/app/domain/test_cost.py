"""The cost estimator (pure): what a job holds at its peak, and which fields drive it."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.cost import (
    RUNTIME_BYTES,
    DataShape,
    builtin_data,
    estimate,
    itemsize_of,
    memory_fields,
)
from app.schemas.job_spec import JobSpec

REPRO = {
    "framework": "pytorch",
    "dataset": {"name": "synthetic", "samples": 2_000_000, "features": 4096},
    "max_restarts": 10,
}


def spec(**fields: Any) -> JobSpec:
    return JobSpec.model_validate({"framework": "pytorch", **fields})


def test_synthetic_data_counts_its_float64_generation_and_float32_copy() -> None:
    job = JobSpec.model_validate(REPRO)
    cost = estimate(job, builtin_data(job))  # type: ignore[arg-type]
    values = (2_000_000 + 400_000) * 4096  # the test split is an extra fifth
    assert cost.data_bytes == values * (8 + 4) + 2_400_000 * 8
    assert cost.memory_bytes > 110e9 and cost.largest_part() == "data"
    assert memory_fields(job, cost) == ["dataset.samples", "dataset.features"]


def test_adam_keeps_two_moments_sgd_none() -> None:
    data = DataShape(100, 0, (10,), 4, 2)
    adam = estimate(spec(dataset={"name": "digits"}), data)
    sgd = estimate(spec(dataset={"name": "digits"}, optimizer={"name": "sgd"}), data)
    params = 10 * 128 + 128 + 128 * 2 + 2
    assert adam.model_bytes == (2 + 2) * params * 4 and sgd.model_bytes == 2 * params * 4
    # Two checkpoints of weights and moments, then the model file, model.onnx and weights.npz.
    assert adam.disk_bytes == 2 * 3 * params * 4 + 3 * params * 4
    momentum = {"name": "sgd", "momentum": 0.9}
    assert estimate(spec(dataset={"name": "digits"}, optimizer=momentum), data).model_bytes == (
        3 * params * 4
    )


def test_rmsprop_keeps_its_square_average_and_a_momentum_buffer_when_asked() -> None:
    data = DataShape(100, 0, (10,), 4, 2)
    plain = estimate(spec(dataset={"name": "digits"}, optimizer={"name": "rmsprop"}), data)
    both = {"name": "rmsprop", "momentum": 0.5}
    momentum = estimate(spec(dataset={"name": "digits"}, optimizer=both), data)
    params = 10 * 128 + 128 + 128 * 2 + 2
    assert plain.model_bytes == 3 * params * 4 and momentum.model_bytes == 4 * params * 4


def test_activations_grow_with_the_batch_and_name_it() -> None:
    small = spec(dataset={"name": "mnist"}, model={"type": "cnn"})
    big = spec(dataset={"name": "mnist"}, model={"type": "cnn"}, training={"batch_size": 65536})
    cost = estimate(big, builtin_data(big))  # type: ignore[arg-type]
    assert cost.activation_bytes == 2048 * estimate(small, builtin_data(small)).activation_bytes
    assert memory_fields(big, cost) == ["training.batch_size"]


def test_ddp_replicas_are_processes_that_each_load_the_data() -> None:
    one = spec(dataset={"name": "digits"})
    four = spec(dataset={"name": "digits"}, resources={"replicas": 4})
    single, ddp = (estimate(s, builtin_data(s)) for s in (one, four))  # type: ignore[arg-type]
    assert ddp.processes == 4 and ddp.data_bytes == single.data_bytes
    assert ddp.memory_bytes >= 4 * (single.data_bytes + RUNTIME_BYTES)
    assert "resources.replicas" in memory_fields(four, ddp)
    mirrored = JobSpec.model_validate(
        {"framework": "tensorflow", "dataset": {"name": "digits"}, "resources": {"replicas": 4}}
    )
    shared = estimate(mirrored, builtin_data(mirrored))  # type: ignore[arg-type]
    assert shared.processes == 1 and shared.memory_bytes < ddp.memory_bytes


@pytest.mark.parametrize(("dtype", "size"), [("uint8", 1), ("int16", 2), ("float64", 8)])
def test_itemsize_of_stored_dtypes(dtype: str, size: int) -> None:
    assert itemsize_of(dtype) == size


def test_uploads_have_no_builtin_shape() -> None:
    assert builtin_data(spec(dataset={"id": "abc"})) is None


def test_frozen_weights_are_held_and_saved_but_keep_no_gradient_or_state() -> None:
    data = DataShape(100, 0, (10,), 4, 2)
    layers = [{"name": "d", "op": "dense", "units": 8, "trainable": False}]
    model = {"type": "graph", "layers": layers}
    cost = estimate(spec(dataset={"name": "digits"}, model=model), data)
    frozen, trained = 10 * 8 + 8, 8 * 2 + 2
    held = frozen + trained
    assert cost.parameters == trained
    assert cost.model_bytes == (held + trained) * 4 + 2 * trained * 4  # Adam's two moments
    assert cost.disk_bytes == 2 * (held + 2 * trained) * 4 + 3 * held * 4


def test_a_streamed_data_set_counts_what_a_process_holds_of_it_not_its_size() -> None:
    """A sharded data set of 10 TB: the estimate is the reader's budget and sample, so it is
    admitted wherever those fit."""
    whole = DataShape(600_000_000, 0, (4096,), 4, 4)
    streamed = DataShape(600_000_000, 0, (4096,), 4, 4, held_bytes=700 * 2**20)
    job = spec(dataset={"id": "d"}, model={"hidden_units": [8]})
    assert estimate(job, streamed).data_bytes == 700 * 2**20
    assert estimate(job, whole).data_bytes > 10**13
    assert estimate(job, streamed).memory_bytes < 2 * 2**30
