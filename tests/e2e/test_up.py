"""`epochal up` (what `make run` calls) as a user runs it: one command migrates, writes an admin
key, starts the API and a worker, prints a curl that works as pasted, and Ctrl-C stops it all;
so do SIGTERM and SIGHUP, and a job they interrupt resumes from its checkpoint on the next start."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.procs import (
    alive,
    cmdline,
    parent_of,
    processes_of,
    training_children,
    training_processes_of,
)
from tests.helpers import ROOT, as_background_job, free_port, wait_for_status, wait_until

pytestmark = pytest.mark.e2e
STOP_WITHIN = 30.0  # seconds from a stop signal until `up` and every process under it are gone
# Short epochs (~0.03-0.1 s a core) and enough of them to be stopped part-way: the stop comes
# after epoch 2 is seen, and the rest must not be done by then even on a fast machine (in CI a
# 200-epoch job of four times these steps once ended inside 20 s).
RESUMABLE: dict[str, Any] = {
    "framework": "pytorch",
    "dataset": {"name": "synthetic", "samples": 1000, "features": 16},
    "model": {"hidden_units": [32]},
    "training": {"epochs": 60, "batch_size": 16},
    "checkpoint_every_epochs": 1,
}
Up = tuple[subprocess.Popen[bytes], Path, Path, str]


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


def up_env(home: Path, port: int) -> dict[str, str]:
    """The environment of an `epochal up` on `home` and `port`, none of ours leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")}
    return env | {
        # The suite's measured cache (tests/conftest.py), as every worker of the tests has: a
        # worker that measures TensorFlow first starts its warm child only after four timed
        # TensorFlow processes at idle priority, minutes on a busy 2-CPU machine.
        "EPOCHAL_CACHE_DIR": os.environ["EPOCHAL_CACHE_DIR"],
        "EPOCHAL_HOME": str(home),
        "EPOCHAL_PORT": str(port),
        "EPOCHAL_WARM_FRAMEWORKS": "pytorch",  # no TensorFlow import on a shared CPU
        "EPOCHAL_MAINTENANCE_SECONDS": "1",  # a re-queued job is re-sent within a second
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture
def start_up(tmp_path: Path) -> Iterator[Callable[[], Up]]:
    """Starts `python -m app.cli up` on one home and port (again: a restart); each is killed
    (as a group, with the warm children that run in sessions of their own) if left."""
    home, port = tmp_path / "home", free_port()
    env = up_env(home, port)
    started: list[subprocess.Popen[bytes]] = []

    def start() -> Up:
        out = tmp_path / f"up-{len(started)}.out"
        with open(out, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "up"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=as_background_job,  # Ctrl-C must work even so
            )
        started.append(proc)
        return proc, home, out, f"http://127.0.0.1:{port}"

    yield start
    # Every `up`'s children are found before any is killed: once an `up` is gone, its children
    # are nobody's descendants (a restart test leaked its second `up`'s worker that way).
    leftovers = set(processes_of(home))
    for proc in started:
        leftovers |= set(descendants(proc.pid))
    for proc in started:  # after a failure: the group, and children in sessions of their own
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def up(start_up: Callable[[], Up]) -> Up:
    return start_up()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_up_serves_trains_and_stops_on_ctrl_c(up: Up) -> None:
    proc, home, out, url = up
    wait_until(lambda: _healthy(url), 30, "`epochal up` to answer /healthz")
    wait_until(lambda: f"epochal is up on {url}" in out.read_text(), 60, "the banner")

    output = out.read_text()
    banner = output[output.index(f"epochal is up on {url}") :].split("Ctrl-C stops")[0]
    key_file = home.resolve() / "api-key"
    # Below Celery's own banner and its ready line, where a terminal's last screen shows it.
    assert output.index("[tasks]") < output.index(banner) and "ready." not in banner, output
    assert f"{url}/ui" in banner and f"admin key  {key_file}" in banner
    point = next(line.strip() for line in banner.splitlines() if "export EPOCHAL_HOME" in line)
    assert point == f"export EPOCHAL_HOME={home.resolve()} EPOCHAL_URL={url}"  # absolute
    cli = Path(sys.executable).parent / "epochal"
    assert f"The CLI is {cli}; `source {cli.parent}/activate` puts it on PATH" in banner
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
    # The CLI as the banner says, from another directory: it finds the service and the key.
    listed = subprocess.run(
        ["bash", "-c", f"{point} && {cli} jobs"],
        cwd=home.parent.parent,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")},
    )
    assert listed.returncode == 0 and job["id"] in listed.stdout, listed.stdout + listed.stderr
    poll = next(line.strip() for line in banner.splitlines() if line.strip().endswith("/metrics"))
    metrics = subprocess.run(
        ["bash", "-c", poll.replace("JOB_ID", job["id"])], capture_output=True, text=True
    )
    assert len(json.loads(metrics.stdout)["items"]) == job["spec"]["training"]["epochs"]

    children = descendants(proc.pid)
    commands = " ".join(children.values())
    assert "app.cli api" in commands and "celery" in commands, commands
    stop_and_check(proc, home, url, signal.SIGINT)  # Ctrl-C


def stop_and_check(proc: subprocess.Popen[bytes], home: Path, url: str, signum: int) -> None:
    """Send `signum` to `up`: it, and every process it started, are gone within STOP_WITHIN."""
    children = descendants(proc.pid)
    proc.send_signal(signum)
    deadline = time.monotonic() + STOP_WITHIN
    proc.wait(timeout=STOP_WITHIN)
    while time.monotonic() < deadline and any(alive(pid) for pid in children):
        time.sleep(0.2)
    assert {pid: cmd for pid, cmd in children.items() if alive(pid)} == {}
    assert training_processes_of(home) == []  # warm ones too, whenever started
    assert processes_of(home) == {}
    assert not (home / "up.pids.json").exists()  # a clean stop leaves no stale record
    assert not _healthy(url)
    with socket.socket() as sock:  # the port is free for the next start
        sock.bind(("127.0.0.1", int(url.rsplit(":", 1)[1])))


def _client(url: str, home: Path) -> httpx.Client:
    key = (home / "api-key").read_text().strip()
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _epochs(client: httpx.Client, job_id: str) -> list[int]:
    return [row["epoch"] for row in client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]]


def _rows(home: Path, job_id: str) -> list[tuple[int, int]]:
    """(epoch, attempt that wrote it) of each stored row, straight from the SQLite file."""
    with contextlib.closing(sqlite3.connect(home / "epochal.db")) as db:
        query = "SELECT epoch, attempt FROM epoch_metric WHERE job_id = ? ORDER BY epoch"
        return [(int(e), int(a)) for e, a in db.execute(query, (job_id,))]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_up_stops_on_signal(up: Up, signum: int) -> None:
    """What systemd, `docker stop`, `timeout`, `kill` or a closed terminal send stops it all."""
    proc, home, _, url = up
    wait_until(lambda: _healthy(url), 30, "`epochal up` to answer /healthz")
    wait_until(lambda: training_processes_of(home), 60, "the warm training process")
    stop_and_check(proc, home, url, signum)


def test_a_job_stopped_by_sigterm_resumes_on_the_next_start(start_up: Callable[[], Up]) -> None:
    proc, home, _, url = start_up()
    wait_until(lambda: _healthy(url), 30, "`epochal up` to answer /healthz")
    with _client(url, home) as client:
        job = client.post("/v1/jobs", json=RESUMABLE).json()
        wait_until(lambda: len(_epochs(client, job["id"])) >= 2, 120, "two finished epochs")
    stop_and_check(proc, home, url, signal.SIGTERM)
    assert training_children(job["id"]) == []
    stopped_after = len(_rows(home, job["id"]))
    assert 2 <= stopped_after < RESUMABLE["training"]["epochs"]

    _, _, _, url = start_up()  # the same home: the job waits there, re-queued
    wait_until(lambda: _healthy(url), 30, "`epochal up` to answer /healthz again")
    with _client(url, home) as client:
        done = wait_for_status(client, job["id"], {"succeeded", "failed", "cancelled"}, 180)
        log = client.get(f"/v1/jobs/{job['id']}/logs", params={"tail": 5000}).json()["lines"]
    assert (done["status"], done["attempt"]) == ("succeeded", 2), done["error"]
    epochs = RESUMABLE["training"]["epochs"]
    requeued = [t for t in done["transitions"] if t["to_status"] == "queued" and t["attempt"]]
    assert [t["reason"] for t in requeued] == [
        f"worker shutting down; re-queued (stopped after epoch {stopped_after} of {epochs})"
    ]
    assert f"resuming from the checkpoint of epoch {stopped_after}" in "\n".join(log)
    assert _rows(home, job["id"]) == [
        (epoch, 1 if epoch <= stopped_after else 2) for epoch in range(1, epochs + 1)
    ]
