"""docker-compose.yml and the Dockerfile: validated here (no Docker engine can run them)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def compose_config() -> dict:  # type: ignore[type-arg]
    if shutil.which("docker-compose") is None:
        if os.environ.get("EPOCHAL_REQUIRE_COMPOSE"):
            pytest.fail("docker-compose is required here (make install puts it in with apt)")
        pytest.skip("docker-compose is not installed")
    out = subprocess.run(
        ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)


def test_compose_file_is_valid_and_has_the_production_services() -> None:
    config = compose_config()
    services = config["services"]
    assert {"postgres", "redis", "migrate", "api", "worker"} <= set(services)
    worker = services["worker"]
    device = worker["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert (
        worker["environment"]["CUDA_VISIBLE_DEVICES"]
        == worker["environment"]["EPOCHAL_WORKER_GPUS"]
    )
    assert worker["environment"]["EPOCHAL_BROKER_URL"].startswith("redis://")
    assert services["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_api_image_has_no_framework() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    api_stage = dockerfile.split("FROM base AS api")[1].split("FROM base AS worker")[0]
    assert "torch" not in api_stage and "tensorflow" not in api_stage
    assert "FROM base AS worker" in dockerfile
