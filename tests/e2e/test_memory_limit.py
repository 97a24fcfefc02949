"""A job whose true memory use exceeds its limit, on a real worker with PostgreSQL + Redis: the
worker holds each training process to a fixed 1 GiB here (the test setting), and a synthetic
data set of 150 000 × 1 000 float64 values (1.2 GB before its float32 copy) goes past it
while it is generated. The job ends failed / out_of_memory within seconds of its start, on its
first attempt, its error gives the limit and the peak; the worker goes on and runs the next
job, and its memory group is gone. Once with a cgroup (where the box has one), once with the
supervisor's watchdog, the fallback where it has none."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from tests.helpers import running_service, scaled, submit_job, wait_for_status, wait_until
from worker.supervisor.memory_limit import cgroup_v1, cgroup_v2

pytestmark = [pytest.mark.e2e, pytest.mark.torch]
ENDED = {"succeeded", "failed", "cancelled"}
LIMIT_MIB = 1024
GREEDY = {
    "dataset": {"name": "synthetic", "samples": 150_000, "features": 1_000},
    "model": {"hidden_units": [8]},
    "training": {"epochs": 1},
}
SMALL = {"dataset": {"name": "digits"}, "model": {"hidden_units": [8]}, "training": {"epochs": 1}}


def seconds_between(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


@pytest.mark.parametrize("kind", ["auto", "watchdog"])
def test_a_job_over_its_memory_limit_ends_out_of_memory_and_the_worker_goes_on(
    pg_service_env: dict[str, str], kind: str
) -> None:
    """auto: a cgroup where this box lets the worker make one; watchdog: the fallback, forced."""
    limit = {"EPOCHAL_JOB_MEMORY_LIMIT_BYTES": str(LIMIT_MIB * 2**20)}
    with (
        running_service(pg_service_env, EPOCHAL_JOB_MEMORY_LIMIT=kind, **limit) as service,
        service.client() as client,
    ):
        greedy = submit_job(client, **GREEDY)["id"]
        done = wait_for_status(client, greedy, ENDED, 120)
        assert (done["status"], done["stop_reason"], done["error_code"]) == (
            "failed",
            "error",
            "out_of_memory",
        )
        assert done["attempt"] == 1  # final: the same spec would go over again
        error = done["error"]
        assert f"limit {LIMIT_MIB} MiB (EPOCHAL_JOB_MEMORY_LIMIT_BYTES)" in error, error
        assert "peak" in error and "peak unknown" not in error, error
        assert ("enforced by watchdog" in error) == (kind == "watchdog"), error
        assert seconds_between(done["started_at"], done["finished_at"]) < scaled(30)
        logs = client.get(f"/v1/jobs/{greedy}/logs").text
        assert f"memory limit {LIMIT_MIB} MiB" in logs
        # The worker goes on: the next job runs on it and succeeds.
        small = submit_job(client, **SMALL)["id"]
        after = wait_for_status(client, small, ENDED, 120)
        assert after["status"] == "succeeded", after
        assert len(client.get("/v1/workers").json()["items"]) == 1  # the same, its only one
        assert client.get("/healthz").status_code == 200

        # Nothing left behind: the groups of both attempts are removed (by the supervisor once
        # its child has gone, which may be just after the job's end is recorded).
        def left() -> list[Path]:
            parents = [cgroup_v2.parent_group(), cgroup_v1.parent_group()]
            found = [p for parent in parents if parent is not None for p in parent.iterdir()]
            return [p for p in found if greedy in p.name or small in p.name]

        wait_until(lambda: not left(), 30, "the two jobs' memory groups to be removed")
