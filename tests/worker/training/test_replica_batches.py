"""Steps per epoch (worker.training.data.splits.global_steps, RELIABILITY.md P21): one replica
trains the partial last batch; several drop it, so no replica gets a short or empty share."""

from __future__ import annotations

import pytest

from worker.training.data.splits import global_steps


@pytest.mark.parametrize(
    ("samples", "batch", "replicas", "steps"),
    [(1000, 64, 1, 16), (1000, 64, 2, 15), (1024, 64, 2, 16), (1000, 64, 4, 15), (63, 64, 1, 1)],
)
def test_the_partial_last_batch_is_dropped_only_with_several_replicas(
    samples: int, batch: int, replicas: int, steps: int
) -> None:
    assert global_steps(samples, batch, replicas) == steps
