"""`epochal up` (what `make run` calls) as a user runs it: one command migrates, writes an admin
key, starts the API and a worker, prints a curl that works as pasted, and Ctrl-C stops it all."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.procs import alive, cmdline, parent_of
from tests.helpers import ROOT, free_port, wait_for_status, wait_until

pytestmark = pytest.mark.e2e
STOP_WITHIN = 30.0  # seconds from SIGINT until `up` and every process under it are gone


def descendants(root: int) -> dict[int, str]:
    """Live processes under `root` (by parent pid), with their command lines."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and alive(int(entry.name)):
            try:
                parents[int(entry.name)] = parent_of(int(entry.name))
            except (IndexError, ValueError):  # it exited while we read it
                continue
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = cmdline(pid)
                frontier.append(pid)
    return found


@pytest.fixture
def up(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path, str]]:
    """`python -m app.cli up` on a fresh home and a free port; killed (as a group) if left."""
    home, out = tmp_path / "home", tmp_path / "up.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")}
    env |= {
        "EPOCHAL_HOME": str(home),
        "EPOCHAL_PORT": str(free_port()),
        "EPOCHAL_WARM_FRAMEWORKS": "pytorch",  # no TensorFlow import on a shared CPU
        "PYTHONUNBUFFERED": "1",
    }
    with open(out, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "up"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc, home, out, f"http://127.0.0.1:{env['EPOCHAL_PORT']}"
    finally:  # after a failure: the group, and warm children that run in sessions of their own
        leftovers = descendants(proc.pid)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_up_serves_trains_and_stops_on_ctrl_c(
    up: tuple[subprocess.Popen[bytes], Path, Path, str],
) -> None:
    proc, home, out, url = up
    wait_until(lambda: _healthy(url), 30, "`epochal up` to answer /healthz")

    banner = out.read_text()
    key_file = home.resolve() / "api-key"
    assert f"epochal is starting on {url}" in banner, banner
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    assert key.startswith("ep_") and key not in banner  # the banner names the file, not the key
    curl = next(line.strip() for line in banner.splitlines() if "curl -s -X POST" in line)
    assert f"{url}/v1/jobs" in curl and f"$(cat {key_file})" in curl

    # Pasted into a shell as printed, the example submits a job that the worker trains.
    pasted = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=30)
    job = json.loads(pasted.stdout)
    assert job["status"] == "queued", pasted.stdout + pasted.stderr
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as client:
        assert client.get("/v1/jobs", params={"limit": 1}).status_code == 200
        done = wait_for_status(client, job["id"], {"succeeded", "failed", "cancelled"}, 60)
    assert done["status"] == "succeeded", done["error"]
    poll = next(line.strip() for line in banner.splitlines() if line.strip().endswith("/metrics"))
    metrics = subprocess.run(
        ["bash", "-c", poll.replace("JOB_ID", job["id"])], capture_output=True, text=True
    )
    assert len(json.loads(metrics.stdout)["items"]) == job["spec"]["training"]["epochs"]

    children = descendants(proc.pid)
    commands = " ".join(children.values())
    assert "app.cli api" in commands and "celery" in commands, commands
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    deadline = time.monotonic() + STOP_WITHIN
    proc.wait(timeout=STOP_WITHIN)
    while time.monotonic() < deadline and any(alive(pid) for pid in children):
        time.sleep(0.2)
    assert {pid: cmd for pid, cmd in children.items() if alive(pid)} == {}
    assert not _healthy(url)
