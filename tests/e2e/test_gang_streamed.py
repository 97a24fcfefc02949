"""A sharded data set trained by a gang: a small `.npz` registered by reference through the live
service (PostgreSQL, Redis, a store in S3 that every worker reaches) and ingested by a worker
into several shards; a 2-node job over two workers, each on its own home, streams it and
trains like one worker's two replicas on the same data and seed: the same per-epoch losses,
the same samples (the full global batches, the tail dropped alike) and the same shard reads,
summed over the ranks.

What the service shows of the ranks is their sums: each row's samples and input counts add
every rank's. That every sample id comes once per epoch across the ranks, and every rank runs
the same number of batches, is checked by id in tests/worker/training/test_streamed_ranks.py
(the same reader, in one box); here a rank that ran fewer batches would leave the other
waiting in a collective, and the gang would fail rather than succeed."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.e2e.test_bigger_than_memory import ingested
from tests.e2e.test_gang import (  # noqa: F401 (client and start_worker: fixtures)
    client,
    gang_log_lines,
    live_workers,
    losses,
    start_worker,
    store_settings,
)
from tests.helpers import Service, running_service, wait_for_status, wait_until

pytestmark = pytest.mark.e2e
ROWS, FEATURES, CLASSES = 300, 16, 4
SHARD_BYTES = 4096  # a record is 72 bytes: shards of about 56 rows, 6 in all
# No validation split, so an epoch is its training pass alone and its row's samples/s times
# its seconds are the samples trained: 9 global batches of 32 (288), the 12 after them dropped.
BATCH = 32
ENDED = {"succeeded", "failed", "cancelled"}


@pytest.fixture(scope="module")
def service(
    pg_service_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Service]:
    # The store and the data root in the service's settings, so each worker has them too.
    roots = tmp_path_factory.mktemp("gang-data")
    store = store_settings("s3", request, tmp_path_factory.mktemp("aws"))
    with running_service(
        pg_service_env,
        worker=False,
        EPOCHAL_DISPATCH_RETRY_SECONDS="2",
        EPOCHAL_LEASE_SECONDS="6",
        EPOCHAL_DATA_ROOTS=str(roots),
        EPOCHAL_INGEST_SHARD_BYTES=str(SHARD_BYTES),
        **store,
    ) as svc:
        svc.env["TEST_DATA_ROOT"] = str(roots)
        yield svc


def write_npz(path: Path) -> Path:
    """Classes a tiny model can learn: each sample its class's offset plus noise."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, CLASSES, ROWS)
    x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32) + y[:, None].astype(np.float32)
    np.savez(path, x=x, y=y)
    return path


def submit(api: httpx.Client, dataset: str, framework: str, **resources: int) -> str:
    body = {
        "framework": framework,
        "dataset": {"id": dataset, "validation_split": 0.0},
        "model": {"hidden_units": [16]},
        "training": {"epochs": 2, "batch_size": BATCH, "seed": 5},
        "resources": resources,
    }
    response = api.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def rows(api: httpx.Client, job: str) -> list[dict[str, Any]]:
    return list(api.get(f"/v1/jobs/{job}/metrics").json()["items"])


@pytest.mark.parametrize(
    ("framework", "strategy"),
    [
        pytest.param("pytorch", "ddp", marks=pytest.mark.torch),
        pytest.param("tensorflow", "mirrored", marks=pytest.mark.tf),
    ],
)
def test_a_two_node_gang_streams_a_sharded_data_set_like_two_replicas(
    service: Service,
    client: httpx.Client,  # noqa: F811 (test_gang's fixture)
    start_worker: Callable[[str, Path], None],  # noqa: F811 (test_gang's fixture)
    tmp_path: Path,
    framework: str,
    strategy: str,
) -> None:
    homes = [tmp_path / "a", tmp_path / "b"]
    for name, home in zip("ab", homes, strict=True):
        start_worker(name, home)
    wait_until(lambda: len(live_workers(client)) == 2, 60, "two workers to register")
    source = write_npz(Path(service.env["TEST_DATA_ROOT"]) / f"{secrets.token_hex(4)}.npz")
    dataset = ingested(service, source)  # by either worker, into the store both read
    assert (dataset["status"], dataset["rows"]) == ("ready", ROWS), dataset
    assert dataset["bytes"] > 4 * SHARD_BYTES  # so 5 shards or more: none holds more
    gang = submit(client, str(dataset["id"]), framework, nodes=2)
    done = wait_for_status(client, gang, ENDED, 300)
    assert done["status"] == "succeeded", done["error"]
    assert (done["result"]["replicas"], done["result"]["strategy"]) == (2, strategy)
    lines = gang_log_lines(homes, gang)
    assert any("gang node 0 of 2" in line for line in lines), lines
    assert any("gang node 1 of 2" in line for line in lines), lines

    local = submit(client, str(dataset["id"]), framework, replicas=2)  # one worker's two
    done_local = wait_for_status(client, local, ENDED, 300)
    assert done_local["status"] == "succeeded", done_local["error"]
    two_nodes, two_replicas = losses(client, gang), losses(client, local)
    print(f"{framework} streamed train loss: 2 nodes {two_nodes}, 2 replicas {two_replicas}")
    assert len(two_nodes) == 2
    assert two_nodes == pytest.approx(two_replicas, rel=0.01)
    gang_rows, local_rows = rows(client, gang), rows(client, local)
    print(f"inputs: 2 nodes {list(map(inputs, gang_rows))}, local {list(map(inputs, local_rows))}")
    for row in gang_rows + local_rows:
        trained = row["samples_per_second"] * row["epoch_seconds"]
        assert trained == pytest.approx(9 * BATCH, rel=0.01)  # every rank's full batches
    # Both nodes fetched shards from the store: more bytes than the data set's in epoch 1.
    assert gang_rows[0]["data_read_bytes"] > dataset["bytes"]
    if framework == "pytorch":  # a reader per rank either way (TensorFlow: one per process)
        assert [inputs(r) for r in gang_rows] == [inputs(r) for r in local_rows]


def inputs(row: dict[str, Any]) -> tuple[float, ...]:
    """What the ranks' readers did, summed over them: bytes read, cache hits, misses."""
    return tuple(row[k] for k in ("data_read_bytes", "data_cache_hits", "data_cache_misses"))
