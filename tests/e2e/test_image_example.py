"""docs/guide/images.md as a user runs it, against a live service (API, a real worker):
its blocks, in order, as one script in a directory under the server's EPOCHAL_DATA_ROOTS.
A folder of JPEGs is registered and ingested, examples/residual-image-folder.yaml trains on
it with augmentation, and `epochal predict` answers for JPEG files with a
class of the folder."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from epochal_client.client import Client
from tests.docs_blocks import Block, blocks
from tests.helpers import (
    ROOT,
    Service,
    migrate_in_subprocess,
    run_cli,
    running_service,
    scaled,
    wait_until,
)
from tests.shard_data import image_bytes

pytestmark = pytest.mark.e2e
PAGE = ROOT / "docs" / "guide" / "images.md"
RUN_HERE = "tests/e2e/test_image_example.py"
PREDICTION = re.compile(r"^\s*(\d+)\s+(\S+)\s+([01]\.\d{4})\s*$", re.MULTILINE)


def walkthrough() -> list[Block]:
    return [b for b in blocks(PAGE) if b.no_test and RUN_HERE in b.no_test]


def as_script(steps: list[Block]) -> str:
    """One bash script, as written: each Python block as a heredoc, the shell blocks as they
    are (their variables, ID and JOB, pass from one block to the next)."""
    parts = []
    for block in steps:
        if block.lang == "python":
            parts.append(f"python - <<'PYTHON'\n{block.code}PYTHON\n")
        else:
            parts.append(block.code)
    return "".join(parts)


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data-root")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, roots: Path) -> Iterator[Service]:
    env = {"EPOCHAL_HOME": str(tmp_path_factory.mktemp("images") / "home")}
    migrate_in_subprocess(env)
    with running_service(env, EPOCHAL_DATA_ROOTS=str(roots)) as svc:
        yield svc


def test_the_page_is_run_here_whole() -> None:
    steps = walkthrough()
    assert [b.lang for b in steps] == ["python", "sh", "sh", "sh"]
    assert [b for b in blocks(PAGE) if b not in steps] == []  # no block left out of the run


def test_a_jpeg_folder_trains_and_a_jpeg_is_predicted(service: Service, roots: Path) -> None:
    workdir = roots / "user"
    workdir.mkdir()
    (workdir / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")}
    env |= {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'client'}",
        "EPOCHAL_URL": service.url,
        "EPOCHAL_API_KEY": service.api_key,
        "COLUMNS": "120",
    }
    run = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", as_script(walkthrough())],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(400),
    )
    assert run.returncode == 0, f"exited {run.returncode}\n{run.stdout}\n{run.stderr}"
    assert len(list((workdir / "photos").rglob("*.jpg"))) == 60
    assert re.search(r"status\s+ready", run.stdout) and re.search(r"rows\s+60", run.stdout)
    answers = PREDICTION.findall(run.stdout)  # unseen/zero.jpg, one.jpg, two.jpg
    assert [row for row, _, _ in answers] == ["0", "1", "2"], run.stdout
    names = ["zero", "one", "two"]
    assert {label for _, label, _ in answers} <= set(names), run.stdout  # the folders' names
    # Learned, and the exported model reads a JPEG as training read it: chance gets two or
    # more of the three right about one time in four.
    assert sum(label == name for (_, label, _), name in zip(answers, names, strict=True)) >= 2, (
        run.stdout
    )


def webdataset_tar(path: Path, samples: int) -> None:
    """A tar in the WebDataset layout: <key>.jpg and <key>.cls, the class number, per sample."""
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w") as tar:
        for n in range(samples):
            members = {
                "jpg": image_bytes(rng.integers(0, 256, (20, 24, 3)), "JPEG"),
                "cls": str(n % 3).encode(),
            }
            for extension, data in members.items():
                info = tarfile.TarInfo(f"s{n:04d}.{extension}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def test_a_tar_of_jpegs_uploaded_as_the_page_says_is_ingested(
    service: Service, tmp_path: Path
) -> None:
    """The page's way for a server that cannot read the user's disk."""
    assert "`--resumable --format webdataset`" in PAGE.read_text()
    webdataset_tar(tmp_path / "photos.tar", 30)
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    argv = ("datasets", "upload", str(tmp_path / "photos.tar"), "--resumable")
    sent = run_cli(service, *argv, "--format", "webdataset", env=cache)
    assert sent.returncode == 0, sent.stderr
    with Client(service.url, service.api_key) as client:
        dataset_id = sent.stdout.strip()
        status = wait_until(
            lambda: (s := client.dataset(dataset_id).status) != "ingesting" and s,
            scaled(60),
            "ingest",
        )
        dataset = client.dataset(dataset_id).raw
    assert status == "ready", dataset
    assert (dataset["rows"], dataset["classes"], dataset["shape"]) == (30, 3, [20, 24, 3])
