"""The worker image's environments as the Dockerfile installs them, resolved without installing.

Each environment is one `pip install --find-links /wheels -r requirements/worker*.txt` step of
the Dockerfile's worker stage. `resolve` runs the same step as `pip install --dry-run --report`
against the package index (for the image's Python and Linux, binary wheels only) with this
checkout's wheels in place of /wheels; `wheel_files` lists each resolved wheel's files from its
zip directory alone (HTTP range requests: a CUDA wheel is hundreds of MB). Both are cached
under ~/.cache/epochal-tests, so the suite pays for them once per change of their inputs.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import ROOT

DOCKERFILE = ROOT / "Dockerfile"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "epochal-tests"
# The image's base is Debian's python:3.X-slim: glibc 2.36 or newer, x86_64.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(17, 37)] + ["manylinux2014_x86_64"]
OFFLINE = re.compile(
    r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|"
    r"Network is unreachable|No route to host|Connection refused|timed out|ProxyError"
)


class IndexUnreachable(Exception):
    """The package index did not answer: the resolution cannot be checked from here."""


@dataclass(frozen=True)
class Step:
    """One `pip install` of the worker stage: which pip (which environment), what it installs."""

    pip: str
    args: tuple[str, ...]

    @property
    def requirement_files(self) -> list[str]:
        return [self.args[i + 1] for i, arg in enumerate(self.args[:-1]) if arg == "-r"]


def worker_stage(text: str) -> str:
    """The worker stage of the Dockerfile, its continuation lines joined."""
    stage = text.split("AS worker\n", 1)[1].split("\nFROM ", 1)[0]
    return re.sub(r"\\\n", " ", stage)


def pip_steps(stage: str) -> list[Step]:
    """Every `pip install` the stage runs, in order."""
    steps = []
    for line in stage.splitlines():
        if not line.startswith("RUN "):
            continue
        for command in line[4:].split("&&"):
            words = shlex.split(command)
            if len(words) > 1 and words[0].endswith("pip") and words[1] == "install":
                steps.append(Step(words[0], tuple(words[2:])))
    return steps


def python_version(text: str) -> str:
    """The image's Python (the Dockerfile's `ARG PYTHON=`)."""
    found = re.search(r"^ARG PYTHON=(\d+\.\d+)$", text, re.MULTILINE)
    assert found, "the Dockerfile names no ARG PYTHON=X.Y"
    return found.group(1)


def isolated_env() -> dict[str, str]:
    """pip as in a fresh image: no pip configuration file, no PIP_* settings of this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def dry_run_argv(python: str, requirements: Path, wheels: Path, report: Path) -> list[str]:
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q"]
    argv += ["--retries", "2"]  # an index out of reach says so in seconds, not minutes
    # Each wheel's metadata by range requests where the index serves none of its own (PEP
    # 658): otherwise pip downloads every wheel whole to read it, gigabytes of CUDA.
    argv += ["--use-feature=fast-deps"]
    argv += ["--report", str(report), "--only-binary=:all:", "--python-version", python]
    argv += ["--implementation", "cp", "--abi", f"cp{python.replace('.', '')}"]
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    return [*argv, "--find-links", str(wheels), "-r", str(requirements)]


def cache_key(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


def resolve(python: str, requirements: Path, wheels: Path, report: Path) -> list[dict[str, Any]]:
    """The `install` entries of pip's report for one environment."""
    argv = dry_run_argv(python, requirements, wheels, report)
    done = subprocess.run(argv, capture_output=True, text=True, env=isolated_env(), timeout=600)
    if done.returncode != 0 and "fast-deps" in done.stderr:  # a pip that dropped the feature
        argv.remove("--use-feature=fast-deps")
        done = subprocess.run(argv, capture_output=True, text=True, env=isolated_env(), timeout=600)
    if done.returncode != 0 and OFFLINE.search(done.stdout + done.stderr):
        raise IndexUnreachable((done.stdout + done.stderr)[-600:])
    assert done.returncode == 0, f"{requirements.name} does not resolve:\n{done.stderr[-3000:]}"
    entries: list[dict[str, Any]] = json.loads(report.read_text())["install"]
    return entries


class _Remote(io.RawIOBase):
    """A file on an HTTP server, read by range requests (zipfile reads only its directory)."""

    def __init__(self, url: str) -> None:
        self.url, self.pos = url, 0
        head = urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60)
        self.size = int(head.headers["Content-Length"])

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = [offset, self.pos + offset, self.size + offset][whence]
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: Any) -> int:
        count = min(len(buffer), self.size - self.pos)
        if count <= 0:
            return 0
        wanted = {"Range": f"bytes={self.pos}-{self.pos + count - 1}"}
        answer = urllib.request.urlopen(
            urllib.request.Request(self.url, headers=wanted), timeout=60
        )
        assert answer.status == 206, f"{self.url}: no range requests (HTTP {answer.status})"
        data = answer.read()
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


def wheel_files(url: str) -> dict[str, list[int]]:
    """Each file of the wheel at `url`, its CRC-32 and size (cached: such URLs never change)."""
    cached = CACHE / "wheel-files" / f"{hashlib.sha256(url.encode()).hexdigest()[:24]}.json"
    if cached.exists():
        files: dict[str, list[int]] = json.loads(cached.read_text())
        return files
    if url.startswith("file://"):
        archive = zipfile.ZipFile(url.removeprefix("file://"))
    else:
        archive = zipfile.ZipFile(io.BufferedReader(_Remote(url), buffer_size=1 << 16))
    files = {info.filename: [info.CRC, info.file_size] for info in archive.infolist()}
    if not url.startswith("file://"):
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(files))
    return files


def cuda_major(name: str, version: str) -> int | None:
    """The CUDA release a package belongs to: its -cuNN suffix; NVIDIA's unsuffixed names
    (nvidia-cublas, ...) and cuda-toolkit began with CUDA 13 and carry the toolkit's major."""
    suffixed = re.search(r"-cu(\d+)$", name)
    if suffixed:
        return int(suffixed.group(1))
    if name == "cuda-toolkit":
        return int(version.split(".")[0])
    return 13 if name.startswith("nvidia-") and name != "nvidia-ml-py" else None
