"""Stopping always stops: SIGINT or SIGTERM, once or twice in quick succession, to `make run`'s
whole process group (as Ctrl-C in a terminal, or `kill -TERM -- -PGID`) or to `epochal up`
alone, while it starts or once it serves, ends every process it started (the API, the Celery
worker and its pool, the warm training process) within the grace period, and frees the port.
An `up` killed with SIGKILL leaves its children running: the next `up` names them, and how to
stop them, instead of starting beside them."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.procs import processes_of, sessions_of
from tests.e2e.test_up import STOP_WITHIN, _healthy, up_env
from tests.helpers import ROOT, as_background_job, free_port, scaled, wait_until

pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class Stop:
    """One way of stopping: whom the signals go to, which, how many, and when."""

    via_make: bool  # the signals go to make's whole process group, else to `up` alone
    signum: int
    times: int
    gap: float  # seconds between the signals
    starting: bool  # sent the moment the API process exists, else once all of it runs

    def __str__(self) -> str:
        target = "make's group" if self.via_make else "up alone"
        when = "while starting" if self.starting else "once running"
        return f"{signal.Signals(self.signum).name} x{self.times} to {target} {when}"


STOPS = [
    Stop(via_make=True, signum=signal.SIGTERM, times=1, gap=0, starting=False),
    Stop(via_make=True, signum=signal.SIGTERM, times=2, gap=0.3, starting=False),
    Stop(via_make=True, signum=signal.SIGINT, times=2, gap=0, starting=True),
    Stop(via_make=False, signum=signal.SIGINT, times=1, gap=0, starting=True),
    Stop(via_make=False, signum=signal.SIGTERM, times=2, gap=0, starting=True),
    Stop(via_make=False, signum=signal.SIGTERM, times=2, gap=0.05, starting=False),
]


def launch(
    home: Path, port: int, via_make: bool, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`make run` (its install step taken as done, the test's interpreter's `epochal`), or
    `python -m app.cli up`, as the leader of a process group of its own."""
    if via_make:
        bin_dir = Path(sys.executable).parent
        argv = ["make", "-s", "-o", "install", "run", f"BIN={bin_dir}"]
    else:
        argv = [sys.executable, "-m", "app.cli", "up"]
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv,
            cwd=ROOT,
            env=up_env(home, port) | (env or {}),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # setsid make run: a process group of its own
            # `up` alone as a shell's background job (SIGINT ignored): Ctrl-C must work even so;
            # make as in a terminal, where Ctrl-C reaches make too.
            preexec_fn=None if via_make else as_background_job,
        )


def _api_started(home: Path) -> bool:
    return any("app.cli api" in cmd for cmd in processes_of(home).values())


def _all_running(home: Path, url: str) -> bool:
    commands = " ".join(processes_of(home).values())
    return _healthy(url) and "worker.child.launch --standby" in commands


def stop_and_check(stop: Stop, home: Path, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    leader = launch(home, port, stop.via_make, tmp_path / "up.out")
    sessions: set[int] = set()
    try:
        if stop.starting:
            wait_until(lambda: _api_started(home), 60, "the API process", interval=0.005)
        else:
            wait_until(lambda: _all_running(home, url), 90, "the API and a warm child")
        sessions = sessions_of(home)  # the API's and the worker's, once started
        for n in range(stop.times):
            time.sleep(stop.gap if n else 0)
            if stop.via_make:
                os.killpg(leader.pid, stop.signum)
            else:
                leader.send_signal(stop.signum)
        sessions |= sessions_of(home)  # a child started since (the file goes with a clean stop)
        deadline = time.monotonic() + scaled(STOP_WITHIN)
        leader.wait(timeout=scaled(STOP_WITHIN))
        while processes_of(home, sessions) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = processes_of(home, sessions)
    finally:
        kill_all(home, sessions | sessions_of(home))
        if leader.poll() is None:
            os.killpg(leader.pid, signal.SIGKILL)
            leader.wait()
    output = (tmp_path / "up.out").read_text(errors="replace")[-3000:]
    assert left == {}, f"{stop}: left running {left}\n{output}"
    assert not (home / "up.pids.json").exists(), f"{stop}: the pid file stayed\n{output}"


def kill_all(home: Path, sessions: set[int]) -> None:
    """After a failure: whatever still runs on the home."""
    for pid in processes_of(home, sessions):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_every_way_of_stopping_stops_everything(tmp_path: Path) -> None:
    if any(s.via_make for s in STOPS) and shutil.which("make") is None:
        pytest.skip("make is not installed")
    home = tmp_path / "home"  # one home for all: after the first, no migration to wait for
    for stop in STOPS:
        stop_and_check(stop, home, tmp_path)


def test_the_next_up_names_what_a_killed_up_left(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    url = f"http://127.0.0.1:{port}"
    # No job runs: a worker's warm shutdown is bounded by the graces (end_within) well inside
    # STOP_WITHIN, when Celery's pool would wait forever.
    graces = {"EPOCHAL_CANCEL_GRACE_SECONDS": "5", "EPOCHAL_KILL_GRACE_SECONDS": "5"}
    first = launch(home, port, via_make=False, log=tmp_path / "first.out", env=graces)
    sessions: set[int] = set()
    try:
        wait_until(lambda: _all_running(home, url), 90, "the API and a warm child")
        first.kill()  # SIGKILL: nothing stops its children, in sessions of their own
        first.wait()
        sessions = sessions_of(home)
        left = processes_of(home)
        assert any("app.cli api" in cmd for cmd in left.values()), left

        second = subprocess.run(
            [sys.executable, "-m", "app.cli", "up"],
            cwd=ROOT,
            env=up_env(home, port),
            capture_output=True,
            text=True,
            timeout=scaled(60),
        )
        assert second.returncode == 1, second.stdout + second.stderr
        message = second.stderr.strip()
        assert "an earlier `epochal up` on this home still runs" in message, message
        api = next(pid for pid, cmd in left.items() if "app.cli api" in cmd)
        assert f"api (pid {api})" in message and "worker (pid " in message
        assert _healthy(url)  # it started nothing beside them: the old API still answers

        how = message.split("stop them first: ", 1)[1]  # as told: kill -TERM -- -PGID …
        subprocess.run(["bash", "-c", how], check=True)
        wait_until(
            lambda: not processes_of(home, sessions), STOP_WITHIN, "what the killed up left to end"
        )
    finally:
        kill_all(home, sessions)
