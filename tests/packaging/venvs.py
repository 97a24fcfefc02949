"""Building the two wheels and installing them in fresh virtualenvs, as a user would.

Nothing here runs from the checkout: the wheels are built from a copy of it, the virtualenvs
link the base interpreter, and commands run with a temp directory as cwd and no PYTHONPATH, so
an import that works only in the source tree fails here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import ROOT

# --no-compile: Python compiles what it imports anyway; byte-compiling all of torch at install
# time is most of the install's cost.
PIP_INSTALL = ("-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-compile")
# Not part of a distribution; dot-directories (.venv, .git, .epochal, ...) are skipped too.
NOT_SOURCE = ("__pycache__", "*.egg-info", "build", "dist", "test-artifacts")
# What `epochal worker` needs beside the two wheels to train a PyTorch job on digits; the worker
# image's PyTorch environment (requirements/worker-pytorch.txt) installs the same.
WORKER_EXTRAS = "torch,data,export"
WORKER_DEPS = ("setproctitle",)
TIMINGS: list[tuple[str, float]] = []


@contextmanager
def timed(step: str) -> Iterator[None]:
    """Record how long `step` took (the session's terminal summary lists every step)."""
    start = time.monotonic()
    yield
    TIMINGS.append((step, time.monotonic() - start))


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a command to success and return its stdout; its whole output if it fails."""
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    assert out.returncode == 0, f"{argv} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


@dataclass(frozen=True)
class Wheels:
    client: Path
    server: Path


@dataclass(frozen=True)
class Venv:
    """A virtualenv with wheels installed, and the environment of a shell that uses it."""

    path: Path
    outside: Path  # a directory outside the checkout, the cwd of every command

    @property
    def epochal(self) -> str:
        return str(self.path / "bin" / "epochal")

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    def env(self, **extra: str) -> dict[str, str]:
        """os.environ without EPOCHAL_* or a PYTHONPATH, this venv first on PATH."""
        drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")}
        env = {k: v for k, v in env.items() if k not in drop}
        bin_dir = str(self.path / "bin")
        return {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", **extra}

    def run(self, *argv: str, **extra_env: str) -> str:
        return run(list(argv), self.outside, self.env(**extra_env))


def _ignore_non_source(directory: str, names: list[str]) -> set[str]:
    skipped = set(shutil.ignore_patterns(*NOT_SOURCE)(directory, names))
    return skipped | {n for n in names if n.startswith(".")}


def build_wheels(base: Path) -> Wheels:
    """`pip wheel --no-deps ./client .` in a clean copy of the checkout (no stale build/)."""
    source, out = base / "src", base / "dist"
    shutil.copytree(ROOT, source, ignore=_ignore_non_source)
    argv = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "wheel"]
    with timed("wheel build (client + server)"):
        run([*argv, "--no-deps", "-w", str(out), "./client", "."], source)
    (client,) = out.glob("epochal_client-*.whl")
    (server,) = out.glob("epochal-*.whl")
    return Wheels(client=client, server=server)


def make_venv(base: Path, name: str, *requirements: str) -> Venv:
    """A fresh virtualenv under `base` with `requirements` installed (never editable)."""
    path, outside = base / name, base / f"{name}-cwd"
    outside.mkdir()
    venv = Venv(path, outside)
    with timed(f"venv creation ({name})"):
        # venv links the base interpreter: nothing of the test's own virtualenv is visible.
        run([sys.executable, "-m", "venv", str(path)], outside)
    with timed(f"pip install ({name})"):
        run([venv.python, *PIP_INSTALL, *requirements], outside, venv.env())
    return venv


def server_requirements(wheels: Wheels) -> list[str]:
    """A server box: both wheels, plus a PyTorch worker's needs (CPU torch, scikit-learn)."""
    return [str(wheels.client), f"{wheels.server}[{WORKER_EXTRAS}]", *WORKER_DEPS]
