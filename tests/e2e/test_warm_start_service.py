"""Warm start and continue through the live service: a real worker finds the source job's
weights and checkpoint in its artifacts directory, and the jobs (their results, model cards and
model.onnx metadata) name their parents; a sweep's trials each warm-start from one job."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import onnx
import pytest

from tests.helpers import (
    Service,
    migrate_in_subprocess,
    running_service,
    scaled,
    wait_for_status,
    wait_until,
)

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
def source(service: Service) -> dict[str, Any]:
    """A succeeded job the others start from."""
    with service.client() as http:
        return succeeded(http, http.post("/v1/jobs", json=SPEC))


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


def onnx_props(http: Any, job_id: str) -> dict[str, str]:
    """The epochal.* metadata of the job's model.onnx, read back with onnx."""
    answer = http.get(f"/v1/jobs/{job_id}/artifacts/onnx")
    assert answer.status_code == 200, answer.text
    model = onnx.load_model_from_string(answer.content)
    return {p.key: p.value for p in model.metadata_props if p.key.startswith("epochal.")}


def test_a_job_warm_starts_and_another_continues_on_a_real_worker(
    service: Service, source: dict[str, Any]
) -> None:
    with service.client() as http:
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
        assert onnx_props(http, warm["id"]) == {
            "epochal.init_from_job": source["id"],
            "epochal.init_nodes": "d1,head",
            "epochal.init_checkpoint": "last",
        }
        more = epochal_continue(
            service, source["id"], "--epochs", "1", "--set", "name=more", "--set", "tags.team=cv"
        )
        continued = wait_for_status(http, more, {"succeeded", "failed"}, 600)
        assert continued["status"] == "succeeded", continued
        assert continued["spec"]["continues"] == source["id"]
        assert (continued["spec"]["name"], continued["spec"]["tags"]) == ("more", {"team": "cv"})
        rows = http.get(f"/v1/jobs/{continued['id']}/metrics").json()["items"]
        assert [row["epoch"] for row in rows] == [3]
        assert continued["result"]["lineage"] == {"continues": source["id"]}
        assert onnx_props(http, continued["id"]) == {"epochal.continues": source["id"]}


def test_each_trial_of_a_sweep_warm_starts_from_its_bases_init(
    service: Service, source: dict[str, Any]
) -> None:
    body = {
        "name": "warm",
        "base": SPEC | {"init": {"from_job": source["id"]}, "training": {"epochs": 1}},
        "parameters": {"training.seed": {"type": "categorical", "choices": [1, 2]}},
        "sampler": {"name": "grid"},
        "pruner": {"name": "none"},
        "max_trials": 2,
        "max_parallel": 1,
    }
    lineage = {"from_job": source["id"], "nodes": ["d1", "head"], "checkpoint": "last"}
    with service.client() as http:
        answer = http.post("/v1/sweeps", json=body)
        assert answer.status_code == 201, answer.text
        url = f"/v1/sweeps/{answer.json()['id']}"

        def ended() -> dict[str, Any] | None:
            sweep = http.get(url).json()
            return sweep if sweep["finished_at"] else None

        sweep = wait_until(ended, 600, "the sweep to end", interval=0.5)
        trials = [http.get(f"/v1/jobs/{t['job_id']}").json() for t in sweep["trials"]]
        why = [(t["status"], t.get("error"), t.get("transitions")) for t in trials]
        assert sweep["status"] == "succeeded" and sweep["counts"] == {"complete": 2}, (sweep, why)
        for trial in sweep["trials"]:
            job = http.get(f"/v1/jobs/{trial['job_id']}").json()
            assert job["spec"]["init"] == job["result"]["lineage"] == lineage
            assert onnx_props(http, job["id"])["epochal.init_from_job"] == source["id"]


def epochal_continue(service: Service, *args: str) -> str:
    """`epochal continue …` against the service; the new job's id it prints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")}
    env |= {"EPOCHAL_URL": service.url, "EPOCHAL_API_KEY": service.api_key}
    argv = [sys.executable, "-m", "app.cli", "continue", *args]
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=scaled(120))
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()
