"""A data set four times the memory its training process may use trains to completion, on a
real service (PostgreSQL, Redis, a real worker) that holds each training process to
LIMIT_MIB (a cgroup where the box lets the worker make one, else the watchdog), and admits no
job estimated above twice that.

The data set is registered by reference (a `.npy` under an allowed root, written through a
memory map so this test never holds it), ingested into shards by the worker, and one epoch of
a tiny model streams through every sample, in PyTorch and in TensorFlow. The peak checked is
the one the worker's memory limit reports for the attempt (its log line): for a cgroup it
counts the process's own memory, not the page cache that reading the shards fills, which the
kernel takes back before it would kill anything, so it is the figure the limit is about."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import Service, running_service, submit_job, wait_for_status, wait_until
from worker.supervisor.memory_limit import cgroup_v1, cgroup_v2

pytestmark = [pytest.mark.e2e]
MIB = 2**20
# How the worker enforces the limit: a cgroup where the box lets it make one, unless the
# environment asks for the watchdog (EPOCHAL_JOB_MEMORY_LIMIT=watchdog: that case on such a box).
CGROUP = os.environ.get("EPOCHAL_JOB_MEMORY_LIMIT", "auto") == "auto" and (
    cgroup_v2.parent_group() is not None or cgroup_v1.parent_group() is not None
)
# With a cgroup, the least the reader allows: it needs two windows of four 64 MiB shards plus
# the batches in flight (528 MiB here), and takes half of a fixed limit (app.domain.
# stream_memory). The group is charged what the training process allocates once in it: for
# PyTorch, a warm child's, its import done before; for TensorFlow, which starts cold in
# these tests (running_service), its import too (~0.3 GiB of its own memory), and it still
# fits. The watchdog counts the whole resident memory, the framework's libraries too, and
# TensorFlow's are larger; the reader's budget grows with the limit, so the peak does too.
LIMIT_MIB = {
    "pytorch": 1088 if CGROUP else 1600,
    "tensorflow": 1088 if CGROUP else 1792,
}
FEATURES = 4096  # large samples: few of them fill the bytes, so the epoch stays short
BATCH = 256
ENDED = {"succeeded", "failed", "cancelled"}
PEAK_LINE = re.compile(r"job ([\w-]+) attempt 1: memory peak (\d+) MiB of its (\d+) MiB limit")


def rows_for(limit_mib: int) -> int:
    """Samples enough for a data set >= 4 x the limit in x alone."""
    return 4 * limit_mib * MIB // (FEATURES * 4) + BATCH


def write_big_npy(path: Path, rows: int) -> int:
    """A structured .npy of `rows` samples (x: FEATURES float32, y: one of 4 classes), written
    a block at a time through a memory map; its size in bytes."""
    dtype = np.dtype([("x", "<f4", (FEATURES,)), ("y", "<i8")])
    array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(rows,))
    rng = np.random.default_rng(0)
    block = 4096
    noise = rng.standard_normal((block, FEATURES), dtype=np.float32)  # drawn once: cheap
    for at in range(0, rows, block):
        n = min(block, rows - at)
        labels = rng.integers(0, 4, n)
        array["x"][at : at + n] = noise[:n] + labels[:, None]
        array["y"][at : at + n] = labels
    array.flush()
    del array
    return path.stat().st_size


def ingested(service: Service, source: Path) -> dict[str, object]:
    with service.client() as client:
        made = client.post("/v1/datasets/references", json={"source": str(source)})
        assert made.status_code == 201, made.text
        dataset_id = made.json()["id"]

        def settled() -> dict[str, object] | None:
            body = client.get(f"/v1/datasets/{dataset_id}").json()
            return body if body["status"] != "ingesting" else None

        return dict(wait_until(settled, 600, f"data set {dataset_id} to be ingested", 1.0))


@pytest.mark.timeout(1200)  # gigabytes written, ingested and read back, on a loaded box
@pytest.mark.parametrize(
    "framework",
    [
        pytest.param("pytorch", marks=pytest.mark.torch),
        pytest.param("tensorflow", marks=pytest.mark.tf),
    ],
)
def test_a_data_set_four_times_the_memory_limit_trains_within_it(
    framework: str, pg_service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    roots = tmp_path_factory.mktemp("big-data")
    limit_mib, rows = LIMIT_MIB[framework], rows_for(LIMIT_MIB[framework])
    size = write_big_npy(roots / "big.npy", rows)
    limit = limit_mib * MIB
    assert size >= 4 * limit
    with running_service(
        pg_service_env,
        EPOCHAL_JOB_MEMORY_LIMIT_BYTES=str(limit),
        # Admitted although the data set is larger: a job counts what it holds of it.
        EPOCHAL_MAX_JOB_MEMORY_BYTES=str(2 * limit),
        EPOCHAL_DATA_ROOTS=str(roots),
    ) as service:
        dataset = ingested(service, roots / "big.npy")
        assert dataset["status"] == "ready", dataset
        assert dataset["rows"] == rows
        (roots / "big.npy").unlink()  # the shards are what trains, and the disk is not endless
        with service.client() as client:
            job = submit_job(
                client,
                framework=framework,
                dataset={"id": dataset["id"], "validation_split": 0.0},
                model={"hidden_units": [8]},
                training={"epochs": 1, "batch_size": BATCH},
            )["id"]
            done = wait_for_status(client, job, ENDED, 900)
            assert done["status"] == "succeeded", done
            (row,) = client.get(f"/v1/jobs/{job}/metrics").json()["items"]
        trained = row["samples_per_second"] * row["epoch_seconds"]
        # Every sample, once: the rate is over the training pass, which is all the epoch is
        # here (no validation), so it times the epoch's seconds to its samples within a batch.
        assert trained == pytest.approx(rows, rel=1e-4)
        log = service.logs / f"{Path(service.env['EPOCHAL_HOME']).parent.name}-worker.log"

        def peak_logged() -> re.Match[str] | None:
            # The supervisor logs it once the process has exited, after the job's end.
            return next((m for m in PEAK_LINE.finditer(log.read_text()) if m[1] == job), None)

        logged = wait_until(peak_logged, 30, f"the worker to log job {job}'s memory peak")
        peak_mib = int(logged[2])
        assert int(logged[3]) == limit_mib
        print(f"{framework}: data set {size / MIB:.0f} MiB, limit {limit_mib} MiB, peak {peak_mib}")
        assert peak_mib <= limit_mib * 1.1
