"""A loss that stops being finite fails the job, names where, and keeps the last good checkpoint."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.domain.job_files import JobFiles
from tests.worker.training.inprocess import make_spec, run_spec

pytestmark = [pytest.mark.torch, pytest.mark.tf]

# SGD at rate 10 on unnormalized regression data diverges; with a linear warm-up (rate 0.25,
# 0.5, 0.75, ... per epoch) it diverges only in a later epoch, after good checkpoints exist.
DIVERGING = {
    "task": "regression",
    "dataset": {"name": "synthetic", "samples": 400, "features": 16, "normalize": "none"},
    "optimizer": {"name": "sgd", "learning_rate": 10.0},
    "training": {"epochs": 8, "batch_size": 32},
}


def where(error: str | None) -> tuple[int, int]:
    found = re.search(r"epoch (\d+), step (\d+)", error or "")
    assert found, error
    return int(found[1]), int(found[2])


@pytest.mark.parametrize(
    "warmup", [None, 40], ids=["diverges-in-epoch-1", "diverges-after-good-epochs"]
)
def test_non_finite_loss_fails_the_job_and_keeps_the_last_good_checkpoint(
    warmup: int | None, tmp_path: Path
) -> None:
    scheduler = {"name": "cosine", "warmup_epochs": warmup} if warmup else None
    places = set()
    for framework in ("pytorch", "tensorflow"):
        run = run_spec(
            make_spec(framework, **DIVERGING, lr_scheduler=scheduler), tmp_path / framework
        )
        outcome = run.outcome
        assert (outcome.status, outcome.stop_reason) == ("failed", "non_finite_loss")
        assert outcome.error_code == "non_finite_loss" and not outcome.retryable
        epoch, step = where(outcome.error)
        assert epoch == len(run.rows) + 1 and step >= 1  # no row for the bad epoch
        files = JobFiles(tmp_path / framework)
        root = files.checkpoints
        saved = sorted(p.name for p in root.glob("epoch-*"))
        if epoch == 1:
            assert saved == [] and not files.latest.exists()
        else:  # nothing written after the last good epoch
            assert saved[-1] == f"epoch-{epoch - 1:04d}"
            assert files.latest.read_text() == saved[-1]
        places.add((epoch, step))
    assert len(places) == 1  # both frameworks diverge at the same step
    assert warmup is None or places.pop()[0] > 2
