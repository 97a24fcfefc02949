"""GET /v1/workers, in-process: rows as the worker's own heartbeat code writes them."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import update

from app.core.db import session_scope
from app.domain.tables import Worker, utcnow
from tests.conftest import make_key
from worker.supervisor.heartbeat import beat, set_current_job


def test_live_workers_with_their_devices_and_only_visible_jobs(db_env: dict[str, str]) -> None:
    from app.main import create_app

    owner, other = make_key("owner"), make_key("other")
    beat("gpu-box", [{"id": "0", "name": None, "memory_mb": None}] * 2)
    beat("cpu-box", [])
    beat("stale-box", [])
    with session_scope() as session:  # heartbeat older than 3 x heartbeat_seconds: not live
        stale = utcnow() - timedelta(seconds=60)
        session.execute(update(Worker).where(Worker.name == "stale-box").values(heartbeat_at=stale))
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        body = {"framework": "pytorch", "dataset": {"name": "digits"}}
        auth = {"Authorization": f"Bearer {owner}"}
        job_id = client.post("/v1/jobs", json=body, headers=auth).json()["id"]
        set_current_job("gpu-box", job_id)
        mine = client.get("/v1/workers", headers=auth).json()["items"]
        theirs = client.get("/v1/workers", headers={"Authorization": f"Bearer {other}"}).json()
    assert [w["name"] for w in mine] == ["cpu-box", "gpu-box"]
    gpu = mine[1]
    assert gpu["gpus"] == 2 and gpu["queues"] == ["gpus-0", "gpus-1", "gpus-2"]
    assert gpu["busy"] and gpu["current_job_id"] == job_id and len(gpu["devices"]) == 2
    assert mine[0]["gpus"] == 0 and mine[0]["queues"] == ["gpus-0"] and not mine[0]["busy"]
    other_view = theirs["items"][1]
    assert other_view["busy"] and other_view["current_job_id"] is None
