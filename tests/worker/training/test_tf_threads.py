"""TensorFlow's intra-op threads: a lone CPU replica whose step is too small to share runs on
one (measured in BENCHMARKS.md); anything else keeps the supervisor's count."""

from __future__ import annotations

import pytest

from worker.training.backend import Placement

pytestmark = pytest.mark.tf


def test_a_small_step_on_one_cpu_replica_runs_on_one_thread() -> None:
    from worker.training.tf.strategy import SHARED_STEP_FLOPS, fitted_to_step

    small, large = SHARED_STEP_FLOPS - 1, SHARED_STEP_FLOPS
    assert fitted_to_step(Placement(threads=4, interop_threads=2), small).threads == 1
    assert fitted_to_step(Placement(threads=4, interop_threads=2), small).interop_threads == 2
    assert fitted_to_step(Placement(threads=4), large).threads == 4
    assert fitted_to_step(Placement(replicas=2, threads=4), small).threads == 4
    assert fitted_to_step(Placement(gpus=[0], threads=4), small).threads == 4
    assert fitted_to_step(Placement(threads=None), small).threads is None  # the default stays
