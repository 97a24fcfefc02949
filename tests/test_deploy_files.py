"""docker-compose.yml and the Dockerfile: validated here (no Docker engine can run them)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging.venvs import WORKER_DEPS, WORKER_EXTRAS

ROOT = Path(__file__).resolve().parent.parent


def run_config(
    file: str = "docker-compose.yml", env: dict[str, str] | None = None, profile: str | None = None
) -> subprocess.CompletedProcess[str]:
    if shutil.which("docker-compose") is None:
        if os.environ.get("EPOCHAL_REQUIRE_COMPOSE"):
            pytest.fail("docker-compose is required here (make install puts it in with apt)")
        pytest.skip("docker-compose is not installed")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("EPOCHAL_", "POSTGRES_"))}
    return subprocess.run(
        [
            "docker-compose",
            "-f",
            str(ROOT / file),
            *(["--profile", profile] if profile else []),
            "config",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**clean, **(env or {})},
    )


def compose_config(
    file: str = "docker-compose.yml", env: dict[str, str] | None = None, profile: str | None = None
) -> dict[str, Any]:
    out = run_config(file, env, profile)
    assert out.returncode == 0, out.stderr
    config: dict[str, Any] = yaml.safe_load(out.stdout)
    return config


def gpu_sets(services: dict[str, Any]) -> dict[str, list[str]]:
    """Host GPU ids each worker service reserves, checked against what it declares inside."""
    sets = {}
    for name, service in services.items():
        if not name.startswith("worker"):
            continue
        device = service["deploy"]["resources"]["reservations"]["devices"][0]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
        env = service["environment"]
        # Inside a container the reserved GPUs are renumbered 0..n-1.
        local = ",".join(str(i) for i in range(len(device["device_ids"])))
        assert env["EPOCHAL_WORKER_GPUS"] == env["CUDA_VISIBLE_DEVICES"] == local, name
        sets[name] = device["device_ids"]
    return sets


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


def test_a_four_gpu_box_runs_two_workers_or_one_over_all() -> None:
    services = compose_config()["services"]
    assert gpu_sets(services) == {
        "worker": ["0", "1"],
        "worker-b": ["2", "3"],
        "worker-all": ["0", "1", "2", "3"],
    }
    assert "profiles" not in services["worker"]  # the default: one worker over GPUs 0,1
    assert services["worker-b"]["profiles"] == ["four-gpus"]
    assert services["worker-all"]["profiles"] == ["all-gpus"]
    names = [services[w]["command"][-1] for w in ("worker", "worker-b", "worker-all")]
    assert len(set(names)) == 3  # distinct Celery node names
    # PostgreSQL and Redis listen on loopback unless EPOCHAL_BIND opens them to other boxes.
    for name, port in (("postgres", "5432"), ("redis", "6379")):
        assert services[name]["ports"][0].startswith(f"127.0.0.1:{port}:{port}")
    bound = compose_config(env={"EPOCHAL_BIND": "10.0.0.5"})["services"]
    assert bound["redis"]["ports"][0].startswith("10.0.0.5:6379")
    assert "--requirepass" in services["redis"]["command"]


def test_a_second_box_runs_only_workers_against_the_first_box() -> None:
    env = {"EPOCHAL_MAIN_HOST": "10.0.0.5", "EPOCHAL_DATA": "/mnt/epochal"}
    services = compose_config("docker-compose.worker.yml", env)["services"]
    assert gpu_sets(services) == {"worker": ["0", "1"], "worker-b": ["2", "3"]}
    assert set(services) == {"worker", "worker-b"}  # no database, broker, API or migrate
    for service in services.values():
        environment = service["environment"]
        assert "@10.0.0.5:5432/epochal" in environment["EPOCHAL_DATABASE_URL"]
        assert environment["EPOCHAL_BROKER_URL"].endswith("@10.0.0.5:6379/0")
        assert service["volumes"] == ["/mnt/epochal:/data:rw"]
    missing = run_config("docker-compose.worker.yml", {"EPOCHAL_DATA": "/mnt/epochal"})
    assert missing.returncode != 0 and "EPOCHAL_MAIN_HOST" in missing.stderr


def test_the_flower_profile_watches_the_workers_broker_on_loopback() -> None:
    """`docker compose --profile flower up -d` (DEPLOY.md): valid, and Flower reads the very
    broker the workers use, password included, without publishing its port beyond the box."""
    services = compose_config(env={"REDIS_PASSWORD": "s3cret"}, profile="flower")["services"]
    flower = services["flower"]
    assert flower["profiles"] == ["flower"] and "profiles" not in services["api"]
    broker = services["worker"]["environment"]["EPOCHAL_BROKER_URL"]
    assert broker == "redis://:s3cret@redis:6379/0"
    assert (
        flower["command"][:2] == ["celery", f"--broker={broker}"] and "flower" in flower["command"]
    )
    assert flower["ports"][0].startswith("127.0.0.1:5555:5555")
    assert "redis" in flower["depends_on"] and flower["image"].startswith("mher/flower:")


def dockerfile_stage(name: str) -> str:
    """The lines of one build stage of the Dockerfile."""
    parts = re.split(r"^FROM \S+ AS (\S+)$", (ROOT / "Dockerfile").read_text(), flags=re.M)
    stages = dict(zip(parts[1::2], parts[2::2], strict=True))
    return stages[name]


def test_the_images_install_the_wheels_the_packaging_tests_install() -> None:
    """Built once in a stage of their own from a copy of every package, never `pip install .`;
    the worker adds what tests/packaging's server venv adds (after the CUDA frameworks)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    build = dockerfile_stage("wheels")
    assert "pip wheel --no-deps -w /wheels ./client ." in build
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {
        p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    for folder in packages | {"client"}:
        assert f"COPY {folder} ./{folder}" in build, folder
    assert "pip install ." not in dockerfile and "pip install -e" not in dockerfile
    assert "alembic.ini" not in dockerfile  # `epochal migrate` finds the migrations installed
    assert "pip install /wheels/*.whl" in dockerfile_stage("api")
    worker = dockerfile_stage("worker")
    assert "/wheels/epochal_client-*.whl" in worker and f"[{WORKER_EXTRAS}]" in worker
    assert all(dep in worker for dep in WORKER_DEPS)
    migrate = compose_config()["services"]["migrate"]
    assert migrate["command"] == ["epochal", "migrate"] and migrate["build"]["target"] == "api"
