"""Every shell and Python block of README.md, the docs site's pages (docs/) and DEPLOY.md,
run as a user runs it: in a directory of its own (with `.epochal/api-key` and `examples/`),
against a live embedded service on a port of its own (the blocks' `127.0.0.1:8000` becomes it;
the CLI finds it through EPOCHAL_PORT), with `epochal` on PATH. A block that cannot run here
says why on the line above it: `<!-- no-test: reason -->`. Each block's exit status must be 0
(curl with --fail-with-body).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.docs_blocks import Block, blocks
from tests.helpers import (
    ROOT,
    Service,
    migrate_in_subprocess,
    running_service,
    scaled,
    submit_job,
    wait_for_status,
)

pytestmark = pytest.mark.e2e
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "DEPLOY.md"]
BLOCKS = [block for path in DOCS for block in blocks(path)]
# Written for a real run, shrunk here: each text must still be in the docs (else they drifted).
SHRINK = {
    "--set training.epochs=3": "--set training.epochs=1 --set dataset.limit=1000",
    '{"name": "digits"}})': '{"name": "digits"}, "training": {"epochs": 2}})',
}
CURL_FAILS = 'curl() { command curl --fail-with-body "$@"; }\n'  # a 4xx or 5xx fails the block


def as_run_here(block: Block, service: Service) -> str:
    """The block's code with the service's address and the shrunk runs."""
    code = block.code.replace("http://127.0.0.1:8000", service.url)
    for text, smaller in SHRINK.items():
        code = code.replace(text, smaller)
    return CURL_FAILS + code if block.lang == "sh" else code


def user_files(workdir: Path) -> None:
    """The files the blocks name as the user's own: images.npz, houses.csv, reviews.npz."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (40, 28, 28), dtype=np.uint8)
    np.savez(workdir / "images.npz", x=images, y=np.arange(40) % 4)
    rows = ["rooms,area,price", *(f"{r % 5 + 1},{50 + r},{100 + 3 * r}" for r in range(40))]
    (workdir / "houses.csv").write_text("\n".join(rows) + "\n")
    ids = rng.integers(0, 20000, (60, 40))
    ids[0, 0] = 19999  # the vocab the block's comment shows: 20000
    np.savez(workdir / "reviews.npz", x=ids, y=np.arange(60) % 2)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    env = {"EPOCHAL_HOME": str(tmp_path_factory.mktemp("docs") / "home")}
    migrate_in_subprocess(env)
    with running_service(env) as svc:
        yield svc


@pytest.fixture(scope="module")
def user(service: Service, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A user's directory and environment, with a succeeded digits job as JOB_ID."""
    workdir = tmp_path_factory.mktemp("user")
    (workdir / ".epochal").mkdir()
    (workdir / ".epochal" / "api-key").write_text(service.api_key + "\n")
    (workdir / "examples").symlink_to(ROOT / "examples")
    user_files(workdir)
    with service.client() as client:
        job = submit_job(client, dataset={"name": "digits"}, training={"epochs": 2})
        wait_for_status(client, job["id"], {"succeeded"}, timeout=240)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")}
    return {
        **env,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'client'}",
        "EPOCHAL_PORT": service.url.rsplit(":", 1)[1],
        "JOB_ID": job["id"],
        "KEY": f"Authorization: Bearer {service.api_key}",
        "COLUMNS": "120",
        "WORKDIR": str(workdir),
    }


def test_every_block_runs_here_or_says_why_not() -> None:
    assert len(BLOCKS) > 20 and any(b.no_test is None for b in BLOCKS)
    assert all(b.no_test for b in BLOCKS if b.no_test is not None), "a no-test without a reason"
    text = "".join(block.code for block in BLOCKS)
    assert [t for t in SHRINK if t not in text] == [], "a shrunk text is gone from the docs"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.no_test is None], ids=lambda b: b.name)
def test_the_block_runs_as_written(block: Block, service: Service, user: dict[str, str]) -> None:
    code = as_run_here(block, service)
    argv = ["bash", "-e", "-o", "pipefail", "-c", code]
    if block.lang == "python":
        argv = [sys.executable, "-c", code]
    run = subprocess.run(
        argv,
        cwd=user["WORKDIR"],
        env=user,
        capture_output=True,
        text=True,
        timeout=scaled(300),
    )
    assert run.returncode == 0, f"{block.name} exited {run.returncode}\n{run.stdout}\n{run.stderr}"
