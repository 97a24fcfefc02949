"""The queued-read benchmark end to end at a tiny load: its seeded jobs are read back through the
API (the stored spec as the API stores one), each queued job gets its standing (a position and an
estimated start) within the benchmark's wait, and both phases are served without errors. No timing
is asserted."""

from __future__ import annotations

import pytest

from app.schemas.job_spec import JobSpec
from app.schemas.stored_spec import shown
from benchmarks.service.queued_read import QUEUED, run_queued_read
from benchmarks.service.seed import SPEC, job_rows
from benchmarks.service.stack import bench_env


def test_the_seeded_spec_is_stored_as_the_api_stores_one() -> None:
    # The hot reads take fields straight from the stored spec: a spec without its defaults
    # filled in answers 500 there, and every benchmark seeded from it waits in vain.
    assert JobSpec.model_validate(SPEC).model_dump(mode="json") == SPEC
    (row,) = job_rows(1, 0, status="queued")
    assert shown(row["spec"])["epochs"] == SPEC["training"]["epochs"]  # type: ignore[arg-type]


@pytest.mark.e2e
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(180)
def test_the_last_queued_job_gets_a_position_and_both_phases_are_served() -> None:
    with bench_env("postgres") as env:
        found = run_queued_read(env, clients=5, seconds=1)
    assert found["last"]["position"] == QUEUED
    assert found["last"]["estimated_start"] is not None
    for phase in ("metrics_poll", "queued_read"):
        assert found[phase]["requests"] > 0
        assert found[phase]["errors"] == 0, found[phase]
