"""One job over several workers: two `epochal worker` processes, each with its own home, on
PostgreSQL + Redis; a 2-node PyTorch job (gloo on CPU) waits holding nothing while only one
worker is free, starts when a second comes, and trains like one worker's two replicas; so does
a 2-node TensorFlow job (MultiWorkerMirroredStrategy) on the same workers; a gang that loses a
member resumes from a store in neither worker's home; on one shared artifacts directory both
nodes use one job folder."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from app.domain.job_files import JobFiles
from tests.helpers import (
    CHECKOUT_CLI,
    ROOT,
    Service,
    metric_attempts,
    running_service,
    scaled,
    wait_for_status,
    wait_until,
)
from tests.storage_server import SeaweedServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.parametrize("service_env", ["postgres"], indirect=True),
]

SPEC: dict[str, Any] = {
    "framework": "pytorch",
    "dataset": {"name": "digits"},
    "model": {"hidden_units": [128, 64]},
    "training": {"epochs": 4, "batch_size": 64},
    "regularization": {"l2": 0.0001},
}


@pytest.fixture(scope="module")
def service(service_env: dict[str, str]) -> Iterator[Service]:
    # Without a worker of its own: each test starts the workers it needs, each on its own home.
    with running_service(
        service_env, worker=False, EPOCHAL_DISPATCH_RETRY_SECONDS="2", EPOCHAL_LEASE_SECONDS="6"
    ) as svc:
        yield svc


@pytest.fixture
def client(service: Service) -> Iterator[httpx.Client]:
    with service.client() as c:
        yield c


@pytest.fixture
def start_worker(service: Service, client: httpx.Client) -> Iterator[Callable[..., None]]:
    """Start a worker on a home of its own (and `env`); the test's workers are stopped when
    it ends."""
    started: list[str] = []

    def start(name: str, home: Path, **env: str) -> None:
        service.start_worker(name, {"EPOCHAL_HOME": str(home), **env})
        started.append(name)

    yield start
    for name in started:
        service.stop(name)
    wait_until(lambda: not live_workers(client), 60, "the test's workers to leave")


def live_workers(client: httpx.Client) -> list[dict[str, Any]]:
    return list(client.get("/v1/workers").json()["items"])


def submit(
    client: httpx.Client, epochs: int = 4, framework: str = "pytorch", **resources: Any
) -> str:
    training = {**SPEC["training"], "epochs": epochs}
    body = {**SPEC, "framework": framework, "training": training, "resources": resources}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def losses(client: httpx.Client, job_id: str) -> list[float]:
    rows = client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]
    assert [row["epoch"] for row in rows] == list(range(1, len(rows) + 1))  # once each
    return [float(row["train_loss"]) for row in rows]


def gang_log_lines(homes: list[Path], job_id: str, nodes: int = 2) -> list[str]:
    """Every node's "gang node" lines, from each node's own log (rank 0's job.log, node N's
    member-N.log) in whichever home it ran."""
    lines = []
    for home in homes:
        for member in range(nodes):
            log = JobFiles.of(home / "artifacts", job_id).rank_log(member)
            if log.exists():
                lines += [line for line in log.read_text().splitlines() if "gang node" in line]
    return lines


def member_log(service: Service, job_id: str, member: int) -> list[str]:
    """`epochal logs JOB --rank N`: the client's command against the live service."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")}
    env |= {"EPOCHAL_URL": service.url, "EPOCHAL_API_KEY": service.api_key}
    argv = [*CHECKOUT_CLI, "logs", job_id, "--rank", str(member)]
    out = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120), check=True
    )
    return out.stdout.splitlines()


def test_a_two_node_job_waits_for_a_second_worker_then_trains_like_two_replicas_in_either_framework(
    service: Service,
    client: httpx.Client,
    start_worker: Callable[[str, Path], None],
    tmp_path: Path,
) -> None:
    homes = [tmp_path / "a", tmp_path / "b"]
    start_worker("a", homes[0])
    wait_until(lambda: len(live_workers(client)) == 1, 60, "worker a to register")
    gang = submit(client, nodes=2)

    def reason() -> str:
        job = client.get(f"/v1/jobs/{gang}").json()
        assert job["status"] == "queued", job
        return str((job.get("queue") or {}).get("reason"))

    wait_until(lambda: reason() == "needs 2 workers; 1 free", 30, "the gang's wait reason")
    time.sleep(scaled(3))  # a few maintenance rounds: still waiting, and holding nothing
    assert reason() == "needs 2 workers; 1 free"
    assert [w["busy"] for w in live_workers(client)] == [False]

    start_worker("b", homes[1])
    trains_like_two_replicas(service, client, homes, gang, "ddp")
    # TensorFlow on the same two workers: MultiWorkerMirroredStrategy, a server per node.
    tf_gang = submit(client, 3, "tensorflow", nodes=2)
    trains_like_two_replicas(service, client, homes, tf_gang, "mirrored")
    a_cancel_mid_epoch_stops_both_nodes_together(client)


def trains_like_two_replicas(
    service: Service, client: httpx.Client, homes: list[Path], gang: str, strategy: str
) -> None:
    """The gang succeeds, rows 1..N once each, and one worker's two replicas (the same global
    batch and seed) give the same per-epoch losses and about the same accuracy."""
    done = wait_for_status(client, gang, {"succeeded", "failed", "cancelled"}, 300)
    assert done["status"] == "succeeded", done["error"]
    assert (done["result"]["replicas"], done["result"]["strategy"]) == (2, strategy)
    lines = gang_log_lines(homes, gang)
    assert any("gang node 0 of 2" in line for line in lines), lines
    assert any("gang node 1 of 2" in line for line in lines), lines
    assert all("rendezvous at tcp://127.0.0.1:" in line for line in lines), lines
    assert all("; interface lo)" in line for line in lines), lines  # the offer's interface
    rank_0s = gang_log_lines(homes, gang, nodes=1)  # job.log only: node 1 writes member-1.log
    assert rank_0s and not any("gang node 1" in line for line in rank_0s), rank_0s
    # Member 1's log is in its worker's own home here; its lines reach the API all the same.
    wait_until(
        lambda: any("ended: exit code 0" in line for line in member_log(service, gang, 1)),
        180,  # a TensorFlow member leaves its collectives after rank 0 has recorded the end
        "member 1's end in its log",
    )
    shipped = member_log(service, gang, 1)
    assert any("gang node 1 of 2" in line and "rendezvous at tcp://" in line for line in shipped)
    missing = client.get(f"/v1/jobs/{gang}/logs", params={"rank": 2})
    assert missing.status_code == 404, missing.text

    spec = done["spec"]
    epochs, framework = spec["training"]["epochs"], spec["framework"]
    local = submit(client, epochs, framework, replicas=2)  # one worker's two replicas
    done_local = wait_for_status(client, local, {"succeeded", "failed", "cancelled"}, 300)
    assert done_local["status"] == "succeeded", done_local["error"]
    two_nodes, two_replicas = losses(client, gang), losses(client, local)
    print(f"{framework} per-epoch train loss: 2 nodes {two_nodes}, 2 replicas {two_replicas}")
    assert len(two_nodes) == len(two_replicas) == epochs
    assert two_nodes == pytest.approx(two_replicas, rel=0.01)
    accuracy = done["result"]["val_accuracy"]
    assert abs(accuracy - done_local["result"]["val_accuracy"]) <= 0.02  # the replica tolerance
    wait_until(
        lambda: not any(w["busy"] for w in live_workers(client)), 30, "both workers to be free"
    )


def a_cancel_mid_epoch_stops_both_nodes_together(client: httpx.Client) -> None:
    """A TensorFlow gang cancelled within its first epoch: the nodes agree every chunk of steps
    whether either was interrupted, so both leave the epoch at the same step (a node left
    alone would wait in a collective for the collective timeout)."""
    body = {
        **SPEC,
        "framework": "tensorflow",
        "dataset": {"name": "synthetic", "samples": 200_000},  # 100,000 steps an epoch
        "training": {"epochs": 2, "batch_size": 2},
        "resources": {"nodes": 2},
    }
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    job = response.json()["id"]

    def stepping() -> bool:
        return bool((client.get(f"/v1/jobs/{job}").json()["step_progress"] or {}).get("step"))

    wait_until(stepping, 120, "the gang's first steps")
    client.post(f"/v1/jobs/{job}/cancel")
    done = wait_for_status(client, job, {"cancelled", "failed", "succeeded"}, timeout=60)
    assert (done["status"], done["current_epoch"]) == ("cancelled", 0), done["error"]
    wait_until(
        lambda: not any(w["busy"] for w in live_workers(client)), 30, "both workers to be free"
    )


def store_settings(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """A store every worker reaches and none holds in its home: a directory of its own, or a
    prefix in SeaweedFS (S3) with the standard AWS variables."""
    if kind == "directory":
        return {"EPOCHAL_STORE_URL": (tmp_path / "store").as_uri()}
    seaweed: SeaweedServer = request.getfixturevalue("seaweed")
    return seaweed.store_env(f"gang-{secrets.token_hex(4)}", tmp_path)


@pytest.mark.parametrize(("framework", "store"), [("pytorch", "s3"), ("tensorflow", "directory")])
def test_a_killed_member_stops_the_gang_which_resumes_whole_on_other_workers(
    service: Service,
    client: httpx.Client,
    start_worker: Callable[..., None],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    framework: str,
    store: str,
) -> None:
    """Workers with homes of their own and a store in none of them: the gang re-forms on the
    survivor and a new worker, and every node takes the checkpoint from the store (or, where
    its own copy matches the set's checksums, from its disk). Nothing goes node to node."""
    settings = store_settings(store, request, tmp_path)
    names = {"p": tmp_path / "p", "q": tmp_path / "q"}
    for name, home in names.items():
        start_worker(name, home, **settings)
    wait_until(lambda: len(live_workers(client)) >= 2, 60, "two workers to register")
    epochs = 12
    job = submit(client, epochs, framework, nodes=2)
    wait_until(lambda: len(metric_attempts(service, job)) >= 2, 240, "epoch 2")
    if store == "s3":  # resumed from the store: a whole checkpoint must have reached it
        wait_until(lambda: latest_checkpoint(service, job), 240, "a checkpoint in the store")
    ranks = {
        name: line
        for name, home in names.items()
        for line in gang_log_lines([home], job)
        if "gang node 1 of 2" in line
    }
    (member,) = ranks  # the worker whose node is rank 1
    service.stop(member, signal.SIGKILL)  # the worker, its supervisor and (by its death) its child
    start_worker("r", tmp_path / "r", **settings)  # the gang re-forms on the survivor and r
    done = wait_for_status(client, job, {"succeeded", "failed", "cancelled"}, 300)
    assert done["status"] == "succeeded", (done["error"], done["transitions"])
    assert done["attempt"] == 2, done["transitions"]  # re-queued once, as a whole gang
    requeue = next(t for t in done["transitions"] if t["to_status"] == "queued" and t["attempt"])
    assert "worker_lost" in requeue["reason"] or "lease expired" in requeue["reason"], requeue
    rows = metric_attempts(service, job)
    assert [epoch for epoch, _ in rows] == list(range(1, epochs + 1))  # rows 1..N once each
    kept = [epoch for epoch, attempt in rows if attempt == 1]
    assert kept == list(range(1, len(kept) + 1)) and len(kept) >= 2  # resumed, not restarted
    assert all(attempt == 2 for epoch, attempt in rows if epoch > len(kept))


def test_a_killed_rank_0_is_reaped_and_the_gang_forms_again(
    service: Service,
    client: httpx.Client,
    start_worker: Callable[[str, Path], None],
    tmp_path: Path,
) -> None:
    """Rank 0's worker holds the job's lease: killed, the lease runs out, the reaper re-queues
    the job, the gang's seats are released, and it forms again on the survivor and a new
    worker. Its checkpoints were on the dead worker's own disk, so the job starts over: rows
    1..N once each all the same."""
    names = {"s": tmp_path / "s", "t": tmp_path / "t"}
    for name, home in names.items():
        start_worker(name, home)
    wait_until(lambda: len(live_workers(client)) >= 2, 60, "two workers to register")
    epochs = 6
    job = submit(client, epochs=epochs, nodes=2)
    wait_until(lambda: len(metric_attempts(service, job)) >= 2, 240, "epoch 2")
    hosts = [
        n
        for n, home in names.items()
        if any("gang node 0 of 2" in line for line in gang_log_lines([home], job))
    ]
    (host,) = hosts
    service.stop(host, signal.SIGKILL)
    start_worker("u", tmp_path / "u")
    done = wait_for_status(client, job, {"succeeded", "failed", "cancelled"}, 300)
    assert done["status"] == "succeeded", (done["error"], done["transitions"])
    assert done["attempt"] == 2, done["transitions"]
    requeue = next(t for t in done["transitions"] if t["to_status"] == "queued" and t["attempt"])
    assert "lease expired" in requeue["reason"], requeue
    assert [epoch for epoch, _ in metric_attempts(service, job)] == list(range(1, epochs + 1))


def test_two_workers_on_one_shared_artifacts_directory_train_a_gang_in_one_folder(
    service: Service,
    client: httpx.Client,
    start_worker: Callable[..., None],
    tmp_path: Path,
) -> None:
    """As in production, where every worker mounts the same storage: both nodes use one job
    folder, each with its own spec, attempt files and log; rank 0 alone checkpoints."""
    shared = tmp_path / "shared"
    for name in ("v", "w"):
        start_worker(name, tmp_path / name, EPOCHAL_ARTIFACTS_DIR=str(shared))
    wait_until(lambda: len(live_workers(client)) >= 2, 60, "two workers to register")
    epochs = 3
    job = submit(client, epochs=epochs, nodes=2)
    done = wait_for_status(client, job, {"succeeded", "failed", "cancelled"}, 300)
    assert done["status"] == "succeeded", (done["error"], done["transitions"])
    assert [epoch for epoch, _ in metric_attempts(service, job)] == list(range(1, epochs + 1))
    rank_0, node_1 = JobFiles.of(shared, job), JobFiles.of(shared, job, rank=1)
    assert rank_0.outcome(1).is_file() and not node_1.outcome(1).exists()  # rank 0 reports
    assert rank_0.spec.is_file() and node_1.spec.is_file()  # each node's supervisor its own
    assert "gang node 0 of 2" in rank_0.log.read_text()
    assert "gang node 1 of 2" in node_1.log.read_text()
    kept = sorted(p.name for p in rank_0.checkpoints.iterdir())  # rank 0's, nothing copied in
    assert kept == [f"epoch-{epochs - 1:04d}", f"epoch-{epochs:04d}", "latest"], kept


# A few tenths of a second an epoch for two gloo nodes on two cores: caught mid-run (the
# preemption lands within about two maintenance rounds and a lease renewal), short overall.
PREEMPTIBLE: dict[str, Any] = {
    **SPEC,
    "dataset": {"name": "synthetic", "samples": 2000, "features": 32},
    "model": {"hidden_units": [64]},
    "training": {"epochs": 12, "batch_size": 16, "seed": 11},
    "resources": {"nodes": 2},
    "priority": 10,
}


def test_a_gang_far_below_a_queued_job_stops_whole_at_its_epoch_and_resumes_as_a_gang(
    service: Service,
    client: httpx.Client,
    start_worker: Callable[..., None],
    tmp_path: Path,
) -> None:
    """Both workers hold the gang: a priority-90 job preempts it, both nodes stop at the epoch
    (no member lost), the high job runs, and the gang re-forms and resumes from its checkpoint
    under the same attempt (on one shared artifacts directory, where node 1's log is at hand)."""
    shared = tmp_path / "shared"
    for name in ("x", "y"):
        start_worker(name, tmp_path / name, EPOCHAL_ARTIFACTS_DIR=str(shared))
    wait_until(lambda: len(live_workers(client)) >= 2, 60, "two workers to register")
    response = client.post("/v1/jobs", json=PREEMPTIBLE)
    assert response.status_code == 201, response.text
    gang = response.json()["id"]
    started = lambda: client.get(f"/v1/jobs/{gang}").json()["current_epoch"] >= 1  # noqa: E731
    wait_until(started, 120, "the gang's first epoch")
    high_body = {**SPEC, "training": {**SPEC["training"], "epochs": 2}, "priority": 90}
    high = client.post("/v1/jobs", json=high_body).json()["id"]
    terminal = {"succeeded", "failed", "cancelled"}
    high_done, done = (wait_for_status(client, i, terminal, 300) for i in (high, gang))
    assert (high_done["status"], done["status"]) == ("succeeded", "succeeded"), done["error"]
    moves = done["transitions"]
    preempted = [t for t in moves if t["reason"].startswith("preempted")]
    assert len(preempted) == 1 and preempted[0]["to_status"] == "queued", moves
    assert high in preempted[0]["reason"]
    assert not any("worker_lost" in t["reason"] for t in moves), moves
    resumed = next(t for t in moves if t["to_status"] == "running" and t["at"] > preempted[0]["at"])
    high_start = next(t["at"] for t in high_done["transitions"] if t["to_status"] == "running")
    assert high_start < resumed["at"]  # the high job ran in between
    assert done["attempt"] == 1 and {t["attempt"] for t in moves[1:]} == {1}, moves
    epochs = PREEMPTIBLE["training"]["epochs"]
    rows = metric_attempts(service, gang)
    assert rows == [(epoch, done["attempt"]) for epoch in range(1, epochs + 1)]
    # Both of node 1's runs ended cleanly. Its supervisor notes its end once its own child
    # exits, which may come after rank 0 has recorded the job's end.
    node_1 = JobFiles.of(shared, gang, rank=1).log
    ends = lambda: node_1.read_text().count("ended: exit code 0") == 2  # noqa: E731
    wait_until(ends, 60, "node 1's second clean end in its log")
    wait_until(
        lambda: not any(w["busy"] for w in live_workers(client)), 30, "both workers to be free"
    )


def latest_checkpoint(service: Service, job_id: str) -> str | None:
    """The job's newest whole checkpoint in the S3 store (job.latest_checkpoint)."""
    engine = sa.create_engine(service.env["EPOCHAL_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            query = sa.text("SELECT latest_checkpoint FROM job WHERE id = :j")
            found = conn.execute(query, {"j": job_id}).scalar()
            return None if found is None else str(found)
    finally:
        engine.dispose()
