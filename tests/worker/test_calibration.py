"""TensorFlow's small-step threads, measured once per box: two real measuring processes (one
per count), the answer written down for this box and read by the back-end, and a worker that
finds its box measured starts its warm-up at once."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.config import get_settings
from tests.helpers import scaled
from worker import calibration
from worker.calibration import (
    CALIBRATION_FILE,
    box_key,
    calibrate,
    calibrate_then,
    measured_threads,
    record,
)
from worker.training.backend import Placement

pytestmark = pytest.mark.tf


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty cache folder for this test (the box's own is shared by its workers)."""
    monkeypatch.setenv("EPOCHAL_CACHE_DIR", str(tmp_path / "cache"))
    get_settings.cache_clear()
    yield tmp_path / "cache"
    get_settings.cache_clear()


def test_a_box_not_measured_is_measured_then_warmed_up(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibration, "ROUNDS", 1)  # one process per count is enough here
    warmed = threading.Event()
    settings = get_settings()
    assert calibrate_then(settings, 2, threading.Thread(target=warmed.set))
    assert warmed.wait(scaled(300))  # the warm-up starts only once both counts are timed
    answer = json.loads((cache / CALIBRATION_FILE).read_text())[box_key(2)]
    assert answer["threads"] in (1, 2)
    assert set(answer["epoch_seconds"]) == {"1", "2"}
    assert all(0 < seconds < 60 for seconds in answer["epoch_seconds"].values())
    assert measured_threads(cache, 2) == answer["threads"]
    # Measured: the next worker of the box warms up at once, and measures nothing.
    assert not calibrate_then(settings, 2, threading.Thread(target=warmed.set))
    assert calibrate(cache, 2, "/nonexistent/python") == answer["threads"]


def test_nothing_is_measured_where_there_is_no_choice(cache: Path) -> None:
    never = threading.Thread(target=lambda: None)
    assert not calibrate_then(get_settings(), 1, never)  # one CPU: one thread either way
    assert not never.is_alive() and not cache.exists()


def test_the_answer_is_kept_per_box_and_count(cache: Path) -> None:
    record(cache, 2, 2, {1: 0.011, 2: 0.009})
    record(cache, 4, 1, {1: 0.011, 4: 0.012})
    assert measured_threads(cache, 2) == 2 and measured_threads(cache, 4) == 1
    assert measured_threads(cache, 3) is None
    assert box_key(2) != box_key(4) and "tensorflow" in box_key(2)
    (cache / CALIBRATION_FILE).write_text("{not json")
    assert measured_threads(cache, 2) is None  # a torn file: measured again


def test_a_small_step_runs_on_the_count_measured_for_this_box(cache: Path) -> None:
    from worker.training.tf.strategy import SHARED_STEP_FLOPS, fitted_to_step

    small, placement = SHARED_STEP_FLOPS - 1, Placement(threads=4, interop_threads=2)
    assert fitted_to_step(placement, small).threads == 1  # not measured: one thread
    record(cache, 4, 4, {1: 0.011, 4: 0.009})
    assert fitted_to_step(placement, small).threads == 4
    record(cache, 4, 1, {1: 0.009, 4: 0.011})
    assert fitted_to_step(placement, small).threads == 1
    assert fitted_to_step(placement, SHARED_STEP_FLOPS).threads == 4  # large: the budget
