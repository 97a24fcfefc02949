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

    owner, other, admin = make_key("owner"), make_key("other"), make_key("root", admin=True)
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
        full = client.get("/v1/workers", headers={"Authorization": f"Bearer {admin}"}).json()
    assert [w["name"] for w in full["items"]] == ["cpu-box", "gpu-box"]
    gpu = full["items"][1]
    assert gpu["gpus"] == 2 and gpu["queues"] == ["gpus-0", "gpus-1", "gpus-2"]
    assert gpu["busy"] and gpu["current_job_id"] == job_id and len(gpu["devices"]) == 2
    assert gpu["hostname"] and gpu["memory_bytes"] and gpu["disk_free_bytes"] is not None
    cpu = full["items"][0]
    assert cpu["gpus"] == 0 and cpu["queues"] == ["gpus-0"] and not cpu["busy"]
    assert mine[1]["busy"] and mine[1]["current_job_id"] == job_id and mine[1]["gpus"] == 2
    other_view = theirs["items"][1]
    assert other_view["busy"] and other_view["current_job_id"] is None


SECRET_FIELDS = ("hostname", "devices", "memory_bytes", "disk_free_bytes")


def test_only_an_admin_key_sees_hostnames_gpu_ids_memory_and_disk(db_env: dict[str, str]) -> None:
    from app.main import create_app

    user, admin = make_key("user"), make_key("root", admin=True)
    gpu = {"id": "GPU-6f0d2c1e-8a1b-4c3d-9e2f-0a1b2c3d4e5f", "name": "H100", "memory_mb": 81559}
    beat("gpus-0-1@secret-host.internal", [gpu, gpu])
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        seen = client.get("/v1/workers", headers={"Authorization": f"Bearer {user}"})
        full = client.get("/v1/workers", headers={"Authorization": f"Bearer {admin}"})
    assert seen.status_code == full.status_code == 200
    summary, detail = seen.json()["items"][0], full.json()["items"][0]
    assert "secret-host" not in seen.text and "GPU-6f0d2c1e" not in seen.text
    assert summary["name"].startswith("gpus-0-1@") and summary["gpus"] == 2
    assert summary["hostname"] is None and summary["devices"] == []
    assert summary["memory_bytes"] is None and summary["disk_free_bytes"] is None
    assert detail["name"] == "gpus-0-1@secret-host.internal"
    assert [d["id"] for d in detail["devices"]] == [gpu["id"]] * 2
    assert all(detail[f] for f in SECRET_FIELDS)  # before, every key got these
