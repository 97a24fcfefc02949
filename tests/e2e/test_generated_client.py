"""A client generated from /openapi.json by openapi-python-client, as many teams make one:
it generates without a warning, every module imports beside the project's own client, and it
round-trips against a live embedded service — submit (and an idempotent replay), get, metrics,
and a 404 that parses to the typed Problem."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import ROOT, Service, migrate_in_subprocess, running_service, scaled

pytestmark = pytest.mark.e2e
GENERATOR = Path(sys.executable).parent / "openapi-python-client"  # the dev extra installs it
PACKAGE = "epochal_api_client"  # from the document's title: not the project's epochal_client

ROUND_TRIP = """
import importlib, json, pkgutil, sys, time
import epochal_client  # the project's own client, in the same environment
import {package} as generated
names = [m.name for m in pkgutil.walk_packages(generated.__path__, "{package}.")]
for name in names:
    importlib.import_module(name)
from {package} import AuthenticatedClient
from {package}.api.jobs import create_job, get_job, list_metrics
from {package}.models import JobPublic, JobSpec, JobStatus, MetricsPublic, Problem
url, key, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
client = AuthenticatedClient(base_url=url, token=key, raise_on_unexpected_status=True)
body = JobSpec.from_dict(spec)
created = create_job.sync_detailed(client=client, body=body, idempotency_key="gen-1")
replay = create_job.sync_detailed(client=client, body=body, idempotency_key="gen-1")
assert isinstance(created.parsed, JobPublic) and isinstance(replay.parsed, JobPublic)
job_id = created.parsed.id
deadline = time.monotonic() + float(sys.argv[4])
while True:
    job = get_job.sync(client=client, job_id=job_id)
    assert isinstance(job, JobPublic), job
    if job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED):
        break
    assert time.monotonic() < deadline, f"still {{job.status}}"
    time.sleep(0.3)
metrics = list_metrics.sync(client=client, job_id=job_id)
assert isinstance(metrics, MetricsPublic), metrics
missing = get_job.sync_detailed(client=client, job_id="00000000-0000-4000-8000-000000000000")
problem = missing.parsed
assert isinstance(problem, Problem), problem
print(json.dumps({{
    "modules": len(names),
    "created": created.status_code, "replayed": replay.status_code,
    "same": replay.parsed.id == job_id,
    "status": str(job.status), "framework": str(job.framework),
    "epochs": [row.epoch for row in metrics.items],
    "missing": [missing.status_code, problem.status, problem.title, problem.detail],
    "ours": epochal_client.__name__,
}}))
"""


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    env = {"EPOCHAL_HOME": str(tmp_path_factory.mktemp("generated") / "home")}
    migrate_in_subprocess(env)
    with running_service(env) as svc:
        yield svc


def generate(url: str, out: Path) -> Path:
    """The generated project from the live /openapi.json, failing on any generator warning."""
    if not GENERATOR.exists():
        pytest.fail(f"{GENERATOR} is missing: the dev extra installs openapi-python-client")
    document = out / "openapi.json"
    document.write_text(httpx.get(f"{url}/openapi.json", timeout=30).text)
    config = out / "config.json"
    config.write_text(json.dumps({"post_hooks": []}))  # no formatter needed to import it
    argv = [str(GENERATOR), "generate", "--path", str(document), "--config", str(config)]
    argv += ["--meta", "none", "--fail-on-warning"]  # none: the package alone, named by title
    made = subprocess.run(argv, cwd=out, capture_output=True, text=True, timeout=scaled(120))
    assert made.returncode == 0, made.stdout + made.stderr
    assert "Warning" not in made.stdout + made.stderr, made.stdout + made.stderr
    return out / PACKAGE


def test_a_generated_client_imports_and_round_trips(service: Service, tmp_path: Path) -> None:
    generated = generate(service.url, tmp_path)
    assert (generated / "__init__.py").is_file()
    spec = {"framework": "pytorch", "dataset": {"name": "digits"}, "training": {"epochs": 2}}
    path = os.pathsep.join([str(generated.parent), str(ROOT), str(ROOT / "client")])
    env = {**os.environ, "PYTHONPATH": path}
    ran = subprocess.run(
        [sys.executable, "-c", ROUND_TRIP.format(package=PACKAGE)]
        + [service.url, service.api_key, json.dumps(spec), str(scaled(120))],
        capture_output=True,
        text=True,
        env=env,
        timeout=scaled(180),
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    got = json.loads(ran.stdout.strip().splitlines()[-1])
    assert got["modules"] >= 60  # every api and model module imported
    assert (got["created"], got["replayed"], got["same"]) == (201, 200, True)
    assert (got["status"], got["framework"]) == ("succeeded", "pytorch")
    assert got["epochs"] == [1, 2]
    assert got["missing"][:3] == [404, 404, "Not Found"]
    assert got["missing"][3] == "no job 00000000-0000-4000-8000-000000000000"
    assert got["ours"] == "epochal_client"
