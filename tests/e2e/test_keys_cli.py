"""`epochal keys create|list|revoke` as an operator runs them (real processes, real database),
seen from the real app: a revoked key gets 401 within a second (the API caches a key's row 1 s)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping

import pytest
from fastapi.testclient import TestClient

from app.api.stream_guard import STREAMS
from tests.helpers import ROOT, scaled, wait_until

pytestmark = pytest.mark.e2e


def keys(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "keys", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )


def create(env: dict[str, str], *args: str) -> tuple[str, str]:
    """(key id, plaintext) of a new key; the plaintext is the last word printed."""
    run = keys(env, "create", *args)
    assert run.returncode == 0, run.stderr
    plaintext = run.stdout.split()[-1]
    key_id = plaintext.split("_")[1]
    assert f"created key {key_id}" in run.stdout
    return key_id, plaintext


@pytest.fixture
def api(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        yield client


def status(api: TestClient, key: str) -> int:
    return api.get("/v1/jobs", headers={"Authorization": f"Bearer {key}"}).status_code


def test_create_list_revoke(db_env: dict[str, str], api: TestClient) -> None:
    alice_id, alice = create(db_env, "alice")
    ops_id, ops = create(db_env, "ops", "--admin")
    assert status(api, alice) == 200 and status(api, ops) == 200

    listed = keys(db_env, "list").stdout
    lines = {line.split()[0]: line.split() for line in listed.splitlines()}
    assert lines[alice_id][1:4] == ["alice", "user", "active"]
    assert lines[ops_id][1:4] == ["ops", "admin", "active"]
    for plaintext in (alice, ops):  # neither the key nor its secret part is ever shown again
        assert plaintext.split("_", 2)[2] not in listed

    revoked = keys(db_env, "revoke", alice_id)
    assert revoked.returncode == 0 and f"revoked {alice_id}" in revoked.stdout
    wait_until(lambda: status(api, alice) == 401, 3, "the revocation to reach the API")
    assert status(api, ops) == 200
    assert keys(db_env, "list").stdout.split(alice_id)[1].split()[2] == "revoked"
    again = keys(db_env, "revoke", alice_id)
    assert again.returncode == 1 and f"no active key {alice_id}" in again.stderr


def test_a_revoked_keys_open_stream_ends_within_seconds(
    db_env: dict[str, str], api: TestClient
) -> None:
    """A live stream checked its key at open only and outlived `keys revoke`."""
    from tests.app.api.test_stream_guard import Stream, own_job

    key_id, key = create(db_env, "streamer")
    stream = Stream(api, key, own_job(api, key))  # the job stays queued: no end of its own
    wait_until(lambda: STREAMS.open[key_id] == 1, 10, "the stream to open")
    revoked = keys(db_env, "revoke", key_id)
    assert revoked.returncode == 0, revoked.stderr
    revoked_at = time.monotonic()
    assert stream.wait(scaled(15)).status_code == 200  # a sanity bound; the time is printed
    print(f"\nthe stream ended {stream.ended_at - revoked_at:.2f} s after `keys revoke` returned")
    assert STREAMS.open[key_id] == 0


JOB = {"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 1}}
SWEEP = {
    "name": "revoked",
    "base": JOB,
    "parameters": {"optimizer.learning_rate": {"type": "loguniform", "low": 1e-3, "high": 1e-1}},
    "objective": {"metric": "val_accuracy"},
    "max_trials": 4,
    "max_parallel": 2,
}


def test_revoking_a_key_cancels_its_sweeps_and_unfinished_jobs(
    db_env: dict[str, str], api: TestClient
) -> None:
    from app.core.db import session_scope
    from app.domain import crud
    from app.domain.tables import Job, Sweep

    def post(key: str, path: str, body: Mapping[str, object]) -> str:
        response = api.post(path, json=body, headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    key_id, key = create(db_env, "leaver")
    other = create(db_env, "stays")[1]
    queued, running = post(key, "/v1/jobs", JOB), post(key, "/v1/jobs", JOB)
    sweep = post(key, "/v1/sweeps", SWEEP)
    theirs = post(other, "/v1/jobs", JOB)
    with session_scope() as session:
        assert crud.claim_job(session, running, "w1", 60) is not None
    revoked = keys(db_env, "revoke", key_id)
    assert revoked.returncode == 0, revoked.stderr
    assert "cancelled 1 sweep(s) and 2 unfinished job(s)" in revoked.stdout
    with session_scope() as session:
        status = {job_id: session.get(Job, job_id).status for job_id in (queued, running, theirs)}  # type: ignore[union-attr]
        trials = session.query(Job).filter(Job.sweep_id == sweep).all()
        assert session.get(Sweep, sweep).status == "cancelled"  # type: ignore[union-attr]
    assert status == {queued: "cancelled", running: "cancelling", theirs: "queued"}
    assert trials and {trial.status for trial in trials} == {"cancelled"}
