"""The worker image resolves and holds together (tests/packaging/image.py says how).

Each environment of the image is installed in one pip step, so no later step can replace what
an earlier one pinned; each resolves from the package index with this checkout's wheels; in
each, no package comes twice and no two packages write the same file with different bytes
(PyTorch's CUDA 13 and TensorFlow's CUDA 12 cuDNN both write nvidia/cudnn/lib/libcudnn.so.9,
which is why the frameworks train in environments of their own); and each holds one CUDA
release. Skipped, saying why, where the package index cannot be reached.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT
from tests.packaging.image import (
    CACHE,
    DOCKERFILE,
    IndexUnreachable,
    cache_key,
    cuda_major,
    pip_steps,
    python_version,
    resolve,
    wheel_files,
    worker_stage,
)

TEXT = DOCKERFILE.read_text()
STEPS = pip_steps(worker_stage(TEXT))
# The training processes' interpreters, as the image sets them (EPOCHAL_<FRAMEWORK>_PYTHON).
PYTHONS = dict(re.findall(r"EPOCHAL_(PYTORCH|TENSORFLOW)_PYTHON=(\S+)", TEXT))


def source_of(step_file: str) -> Path:
    """The checkout's file a Dockerfile path names (the stage copies requirements/ to /tmp)."""
    return ROOT / "requirements" / Path(step_file).name


def test_each_environment_installs_in_one_step_from_a_requirements_file() -> None:
    pips = [step.pip for step in STEPS]
    assert len(set(pips)) == len(pips), f"an environment is installed in more than one step: {pips}"
    for step in STEPS:
        assert len(step.requirement_files) == 1, f"{step.pip}: one -r file and nothing else"
        assert step.args == ("--find-links", "/wheels", "-r", step.requirement_files[0])
        assert source_of(step.requirement_files[0]).is_file()
    # Each framework's training processes run in the environment installed for it.
    for framework, python in PYTHONS.items():
        (step,) = [s for s in STEPS if s.pip == str(Path(python).parent / "pip")]
        assert framework.lower() in step.requirement_files[0]
    assert set(PYTHONS) == {"PYTORCH", "TENSORFLOW"}


def test_the_requirements_pin_this_checkouts_own_version() -> None:
    version = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version is not None
    for step in STEPS:
        text = source_of(step.requirement_files[0]).read_text()
        for pin in re.findall(r"^epochal(?:-client)?(?:\[[^\]]*\])?==(\S+)$", text, re.M):
            assert pin == version.group(1), f"{step.requirement_files[0]} pins epochal {pin}"


@pytest.fixture(scope="module")
def resolved(request: pytest.FixtureRequest) -> dict[str, list[dict[str, Any]]]:
    """Each environment's resolution: cached by everything it depends on, else resolved."""
    files = [source_of(step.requirement_files[0]) for step in STEPS]
    inputs = [DOCKERFILE, ROOT / "pyproject.toml", ROOT / "client" / "pyproject.toml", *files]
    cached = CACHE / "worker-image" / f"{cache_key(*inputs)}.json"
    if cached.exists():
        found: dict[str, list[dict[str, Any]]] = json.loads(cached.read_text())
        return found
    wheels = request.getfixturevalue("wheels").client.parent
    report_dir = request.getfixturevalue("tmp_path_factory").mktemp("reports")
    python = python_version(TEXT)

    def one(file: Path) -> list[dict[str, Any]]:
        entries = resolve(python, file, wheels, report_dir / f"{file.stem}.json")
        return [{**entry["metadata"], "url": entry["download_info"]["url"]} for entry in entries]

    try:  # side by side: mostly waiting on the index
        with ThreadPoolExecutor(len(files)) as pool:
            found = dict(zip([file.name for file in files], pool.map(one, files), strict=True))
    except IndexUnreachable as exc:
        pytest.skip(f"the package index cannot be reached from here, nothing to resolve: {exc}")
    local = {e["name"] for entries in found.values() for e in entries if "file:" in e["url"]}
    assert local <= {"epochal", "epochal-client"}, local
    for entries in found.values():  # our own wheels change with every checkout: no cache
        for entry in entries:
            if entry["url"].startswith("file:"):
                entry["files"] = wheel_files(entry["url"])
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(found))
    return found


@pytest.mark.parametrize("environment", [Path(s.requirement_files[0]).name for s in STEPS])
def test_no_package_twice_and_no_file_written_twice(
    resolved: dict[str, list[dict[str, Any]]], environment: str
) -> None:
    entries = resolved[environment]
    names = [entry["name"].lower().replace("_", "-") for entry in entries]
    assert len(names) == len(set(names)), f"{environment}: a package at two versions"
    urls = [entry["url"] for entry in entries if "files" not in entry]
    with ThreadPoolExecutor(8) as pool:
        listings = dict(zip(urls, pool.map(wheel_files, urls), strict=True))
    writers: dict[str, dict[tuple[int, int], list[str]]] = defaultdict(dict)
    for entry in entries:
        for path, (crc, size) in (entry.get("files") or listings[entry["url"]]).items():
            writers[path].setdefault((crc, size), []).append(entry["name"])
    clashes = {path: found for path, found in writers.items() if len(found) > 1}
    assert not clashes, f"{environment}: files two packages write differently: {clashes}"


@pytest.mark.parametrize("environment", [Path(s.requirement_files[0]).name for s in STEPS])
def test_each_environment_holds_one_cuda_release(
    resolved: dict[str, list[dict[str, Any]]], environment: str
) -> None:
    majors = defaultdict(list)
    for entry in resolved[environment]:
        major = cuda_major(entry["name"].lower(), entry["version"])
        if major is not None:
            majors[major].append(f"{entry['name']}=={entry['version']}")
    assert len(majors) <= 1, f"{environment} mixes CUDA releases: {dict(majors)}"
    expected = {"worker.txt": set(), "worker-pytorch.txt": {13}, "worker-tensorflow.txt": {12}}
    assert set(majors) == expected[environment], dict(majors)  # what DEPLOY.md's driver serves
