"""Warm start and continue through the live service: a real worker finds the source job's
weights and checkpoint in its artifacts directory, and the jobs name their parents."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import Service, migrate_in_subprocess, running_service, scaled, wait_for_status

pytestmark = [pytest.mark.e2e, pytest.mark.torch]
LAYERS: list[dict[str, Any]] = [
    {"name": "flat", "op": "flatten"},
    {"name": "d1", "op": "dense", "units": 32},
    {"name": "act", "op": "activation", "fn": "relu"},
]
SPEC: dict[str, Any] = {
    "framework": "pytorch",
    "dataset": {"name": "digits", "limit": 600},
    "model": {"type": "graph", "layers": LAYERS},
    "training": {"epochs": 2, "batch_size": 32},
}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    env = {"EPOCHAL_HOME": str(tmp_path_factory.mktemp("warm-start") / "home")}
    migrate_in_subprocess(env)
    with running_service(env) as svc:
        yield svc


def succeeded(http: Any, answer: Any) -> dict[str, Any]:
    assert answer.status_code == 201, answer.text
    job = wait_for_status(http, answer.json()["id"], {"succeeded", "failed"}, 600)
    assert job["status"] == "succeeded", job
    return dict(job)


def test_a_job_warm_starts_and_another_continues_on_a_real_worker(service: Service) -> None:
    with service.client() as http:
        source = succeeded(http, http.post("/v1/jobs", json=SPEC))
        frozen = [LAYERS[0], {**LAYERS[1], "trainable": False}, LAYERS[2]]
        body = SPEC | {"model": {"type": "graph", "layers": frozen}}
        warm = succeeded(
            http, http.post("/v1/jobs", json=body | {"init": {"from_job": source["id"]}})
        )
        lineage = {"from_job": source["id"], "nodes": ["d1", "head"], "checkpoint": "last"}
        assert warm["spec"]["init"] == lineage and warm["result"]["lineage"] == lineage
        assert warm["model_summary"]["frozen_parameters"] == 64 * 32 + 32
        card = http.get(f"/v1/jobs/{warm['id']}/artifacts/model-card").json()
        assert card["lineage"] == lineage
        more = epochal_continue(service, source["id"], "--epochs", "1")
        continued = wait_for_status(http, more, {"succeeded", "failed"}, 600)
        assert continued["status"] == "succeeded", continued
        assert continued["spec"]["continues"] == source["id"]
        rows = http.get(f"/v1/jobs/{continued['id']}/metrics").json()["items"]
        assert [row["epoch"] for row in rows] == [3]
        assert continued["result"]["lineage"] == {"continues": source["id"]}


def epochal_continue(service: Service, *args: str) -> str:
    """`epochal continue …` against the service; the new job's id it prints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")}
    env |= {"EPOCHAL_URL": service.url, "EPOCHAL_API_KEY": service.api_key}
    argv = [sys.executable, "-m", "app.cli", "continue", *args]
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=scaled(120))
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()
