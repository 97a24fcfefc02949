"""A full artifacts disk under a running job, with real processes on PostgreSQL + Redis: a 2 MiB
tmpfs is the job's artifacts directory and its second checkpoint does not fit. The job ends
failed / disk_full on its first attempt, the first checkpoint stays whole and loadable, and
the service goes on answering and running jobs that fit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

from app.domain.job_files import JobFiles
from tests.helpers import running_service, small_tmpfs, submit_job, wait_for_status, wait_until
from worker.training.checkpoint import whole_checkpoints

pytestmark = [pytest.mark.e2e, pytest.mark.torch]
ENDED = {"succeeded", "failed", "cancelled"}
# 64-1200-10 on digits with Adam: ~1.08 MB a checkpoint (weights and two moments), so the
# first fits on the 2 MiB disk and the second, written while the first is kept, does not.
# Submitted before any worker reports its free disk, so admission cannot refuse it.
BIG = {
    "dataset": {"name": "digits"},
    "model": {"hidden_units": [1200]},
    "training": {"epochs": 3},
}
SMALL = {"dataset": {"name": "digits"}, "model": {"hidden_units": [8]}, "training": {"epochs": 1}}


def free_disk(client: httpx.Client) -> int:
    workers = client.get("/v1/workers").json()["items"]
    return max((w["disk_free_bytes"] or 0 for w in workers), default=0)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "artifacts", "2m") as folder:
        yield folder


def test_a_full_disk_fails_the_job_as_disk_full_and_keeps_its_last_checkpoint(
    pg_service_env: dict[str, str], disk: Path
) -> None:
    with (
        running_service(pg_service_env, worker=False, EPOCHAL_ARTIFACTS_DIR=str(disk)) as service,
        service.client() as client,
    ):
        job_id = submit_job(client, **BIG)["id"]
        service.start_worker()
        done = wait_for_status(client, job_id, ENDED, 180)
        assert (done["status"], done["stop_reason"], done["error_code"]) == (
            "failed",
            "disk_full",
            "disk_full",
        )
        assert done["attempt"] == 1  # final: a retry would fill the disk again
        assert "no space left" in done["error"] and "last good checkpoint" in done["error"]
        checkpoints = JobFiles.of(disk, job_id).checkpoints
        assert [path.name for path in whole_checkpoints(checkpoints)] == ["epoch-0001"]
        assert sorted(path.name for path in checkpoints.iterdir()) == ["epoch-0001", "latest"]
        saved = torch.load(checkpoints / "epoch-0001" / "torch.pt", weights_only=True)
        assert set(saved) == {"model", "optimizer"} and saved["optimizer"]["state"]
        # The service keeps answering, and runs what fits in the space left.
        assert client.get("/healthz").status_code == 200
        logs = client.get(f"/v1/jobs/{job_id}/logs")
        assert logs.status_code == 200 and "disk_full" in logs.text
        # Admission goes by the free disk the worker reports: wait for a report after the
        # failed write gave its space back.
        wait_until(lambda: free_disk(client) > 500_000, 30, "the worker to report free disk")
        small = submit_job(client, **SMALL)["id"]
        assert wait_for_status(client, small, ENDED, 120)["status"] == "succeeded"
