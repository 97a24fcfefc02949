"""The repository's compose stack, as an operator drives it: docker-compose (v1) commands against
the deployment test's own engine, the `epochal` CLI from the host, psql in the postgres service.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.compose import engine as engines
from tests.compose.engine import Engine
from tests.helpers import ROOT, wait_until

FILES = ("docker-compose.yml", "docker-compose.cpu.yml")
PROJECT = "epochal-compose-test"
# Loopback addresses nothing else here listens on: the host's own PostgreSQL, Redis and API
# ports stay free of the stack's.
BIND = "127.0.0.3"
# The CPU wheel of PyTorch on this machine's disk (pip's find-links), hard-linked into the build
# context: the build cannot reach PyTorch's CPU index.
WHEELS = ROOT / ".compose-wheels"
WHEEL_DIRS = (Path("/opt/wheels"),)


@dataclass
class Stack:
    """A compose project of `files` (the repository's, in order) on the test's engine."""

    engine: Engine
    files: tuple[str, ...] = FILES
    project: str = PROJECT
    api_key: str = ""

    @classmethod
    def create(
        cls,
        engine: Engine,
        files: tuple[str, ...] = FILES,
        project: str = PROJECT,
        secret_names: tuple[str, ...] = (),
    ) -> Stack:
        """secret_names: variables the files require beyond the two passwords, each given a
        fresh random value."""
        names = ("POSTGRES_PASSWORD", "REDIS_PASSWORD", *secret_names)
        env = engine.env | {name: secrets.token_hex(12) for name in names}
        env |= {"EPOCHAL_BIND": BIND, "EPOCHAL_API_BIND": BIND}
        # The classic builder: the engine's BuildKit would fetch the `# syntax=` frontend image.
        env |= {"DOCKER_BUILDKIT": "0", "COMPOSE_DOCKER_CLI_BUILD": "0"}
        return cls(Engine(env), files, project)

    @property
    def url(self) -> str:
        return f"http://{BIND}:8000"

    def compose(self, *args: str, check: bool = True, quiet: bool = False) -> str:
        paths = [ROOT / name for name in self.files]
        if not can_raise_nice():
            paths.append(Path(__file__).parent / "no-nice.yml")
        files = [arg for path in paths for arg in ("-f", str(path))]
        argv = ("docker-compose", "-p", self.project, *files, *args)
        return self.engine.run(*argv, check=check, quiet=quiet)

    def build(self) -> None:
        """The api and CPU worker images from the repository's Dockerfile, through build args."""
        torch_wheel()
        args = ["--build-arg", f"WHEELS={WHEELS.name}", "--build-arg", "TORCH_CPU_INDEX="]
        self.compose("build", *args, "migrate", "worker-cpu")

    def up(self) -> None:
        """`up -d`, then wait for the API's health check and the worker's heartbeat."""
        self.compose("up", "-d")
        wait_until(lambda: self.health("api") == "healthy", 120, "the api's health check")
        if self.api_key:
            wait_until(lambda: self.get("/v1/workers")["items"], 120, "a worker's heartbeat")

    def container(self, service: str) -> str:
        return self.compose("ps", "-q", service, quiet=True).strip()

    def inspect(self, service: str) -> dict[str, Any]:
        out = self.engine.run("docker", "inspect", self.container(service), quiet=True)
        state: dict[str, Any] = json.loads(out)[0]["State"]
        return state

    def health(self, service: str) -> str:
        state = self.inspect(service)
        return str(state.get("Health", {}).get("Status", state["Status"]))

    def create_key(self) -> str:
        out = self.compose("exec", "-T", "api", "epochal", "keys", "create", "test", quiet=True)
        self.api_key = out.split()[-1]
        return self.api_key

    def cli(self, *args: str) -> str:
        """The `epochal` command on the host, against the stack's API."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")}
        env |= {"EPOCHAL_URL": self.url, "EPOCHAL_API_KEY": self.api_key, "COLUMNS": "200"}
        argv = [sys.executable, "-c", "from epochal_client.cli import main; main()", *args]
        out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
        assert out.returncode == 0, f"epochal {' '.join(args)}: {out.stdout}\n{out.stderr}"
        return out.stdout

    def get(self, path: str) -> Any:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        response = httpx.get(self.url + path, headers=headers, timeout=30)
        response.raise_for_status()
        return response.json()

    def sql(self, query: str) -> list[list[str]]:
        """Rows of a query, read with psql inside the postgres service."""
        psql = ["psql", "-U", "epochal", "-d", "epochal", "-tA", "-F", "\t", "-c", query]
        out = self.compose("exec", "-T", "postgres", *psql, quiet=True)
        return [line.split("\t") for line in out.splitlines() if line]

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--tail=200", check=False, quiet=True)

    def leftovers(self) -> list[str]:
        """What of the project is still there: containers, volumes, networks, and anything of a
        container (its root file system, a volume, a network namespace) still mounted."""
        label = f"label=com.docker.compose.project={self.project}"
        left = []
        for listing in (("ps", "-a"), ("volume", "ls"), ("network", "ls")):
            argv = ("docker", *listing, "-q", "--filter", label)
            left += self.engine.run(*argv, quiet=True).split()
        # The engine's own mount of its data root stays until it stops.
        own = {str(engines.CACHE / "docker")}
        roots = (str(engines.CACHE), str(engines.EXEC_ROOT))
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        return left + [m for m in mounts if m.startswith(roots) and m not in own]


@contextmanager
def running(stack: Stack) -> Iterator[Stack]:
    """The project up, with a key and a worker's heartbeat (the containers' logs printed if it
    does not come up); then down, its volumes too."""
    stack.compose("down", "-v", "--remove-orphans", check=False)  # a run cut short
    try:
        try:
            stack.up()
            stack.create_key()
            wait_until(lambda: stack.get("/v1/workers")["items"], 180, "the worker's heartbeat")
        except BaseException:
            print(stack.logs())
            raise
        yield stack
    finally:
        stack.compose("down", "-v", "--remove-orphans", check=False)


@functools.cache
def can_raise_nice() -> bool:
    """Whether root here may raise RLIMIT_NICE, as the worker's `ulimits: {nice: 20}` asks."""
    raise_it = "import resource; resource.setrlimit(resource.RLIMIT_NICE, (20, 20))"
    return subprocess.run([sys.executable, "-c", raise_it], capture_output=True).returncode == 0


def torch_wheel() -> None:
    """The CPU torch wheel pip install uses here, in the build context's WHEELS folder."""
    found = [w for d in WHEEL_DIRS for w in d.glob("torch-2.13.0+cpu-cp311-*.whl")]
    if not found:
        raise RuntimeError(f"no CPU torch 2.13.0 wheel for Python 3.11 in {WHEEL_DIRS}")
    WHEELS.mkdir(exist_ok=True)
    target = WHEELS / found[0].name
    if not target.exists():
        try:
            os.link(found[0], target)
        except OSError:
            target.write_bytes(found[0].read_bytes())
