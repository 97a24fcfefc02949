"""TensorFlow's intra-op threads: a lone CPU replica whose step is too small to share runs on
one on a box not measured (BENCHMARKS.md; tests/worker/test_calibration.py for a measured one);
anything else keeps the supervisor's count."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.config import get_settings
from worker.training.backend import Placement

pytestmark = pytest.mark.tf


def test_a_small_step_on_one_cpu_replica_runs_on_one_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPOCHAL_CACHE_DIR", str(tmp_path))  # this box not measured
    get_settings.cache_clear()
    from worker.training.tf.strategy import SHARED_STEP_FLOPS, fitted_to_step

    small, large = SHARED_STEP_FLOPS - 1, SHARED_STEP_FLOPS
    assert fitted_to_step(Placement(threads=4, interop_threads=2), small).threads == 1
    assert fitted_to_step(Placement(threads=4, interop_threads=2), small).interop_threads == 2
    assert fitted_to_step(Placement(threads=4), large).threads == 4
    assert fitted_to_step(Placement(replicas=2, threads=4), small).threads == 4
    assert fitted_to_step(Placement(gpus=[0], threads=4), small).threads == 4
    assert fitted_to_step(Placement(threads=None), small).threads is None  # the default stays
