"""Each training process runs under a memory limit (worker.supervisor.memory_limit): a real
cgroup v1 group where this box has one writable, the supervisor's watchdog where forced, and
cgroup v2's choice of group on a directory tree laid out as the kernel's (this box has no v2
memory controller to try it on). A child that allocates past its limit is killed, the figures
say by how much, and nothing is left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.core.config import Settings
from tests.helpers import scaled
from worker.supervisor import memory_limit
from worker.supervisor.memory_limit import cgroup_v1, cgroup_v2
from worker.supervisor.memory_limit.base import OOM_SCORE_ADJ, PREFIX, sweep_stale
from worker.supervisor.memory_limit.cgroup_v1 import CgroupV1
from worker.supervisor.memory_limit.watchdog import Watchdog

MIB = 2**20
LIMIT = 200 * MIB
# Touches 600 MiB a page at a time, slowly enough for the watchdog's looks, then waits.
GREEDY = (
    "import time\n"
    "chunks = []\n"
    "for _ in range(60):\n"
    "    chunks.append(bytearray(10 * 2**20))\n"
    "    time.sleep(0.02)\n"
    "time.sleep(60)\n"
)


def greedy() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", GREEDY], start_new_session=True)


def settings(**values: object) -> Settings:
    return Settings.model_validate(values)


def test_the_limit_is_the_estimate_plus_the_margin_or_the_fixed_figure_or_none() -> None:
    assert memory_limit.limit_for(settings(job_memory_margin=0.5), 400 * MIB) == (
        600 * MIB,
        "the admitted estimate, 400 MiB, plus 50%",
    )
    fixed = settings(job_memory_limit_bytes=LIMIT)
    assert memory_limit.limit_for(fixed, 400 * MIB) == (LIMIT, "EPOCHAL_JOB_MEMORY_LIMIT_BYTES")
    assert memory_limit.limit_for(settings(), None) is None  # stored before estimates
    assert memory_limit.limit_for(settings(job_memory_limit="off"), 400 * MIB) is None


@pytest.mark.skipif(cgroup_v1.parent_group() is None, reason="no writable cgroup v1 memory")
def test_a_cgroup_v1_group_kills_the_child_over_its_limit_and_is_removed() -> None:
    child = greedy()
    started = memory_limit.start(settings(), "job-v1", 1, LIMIT // 2, child.pid)
    assert started is not None
    enforced, _ = started
    assert isinstance(enforced, CgroupV1) and enforced.kind == "cgroup v1"
    folder = enforced.folder
    assert (folder / "memory.limit_in_bytes").read_text().strip() == str(LIMIT)
    assert str(child.pid) in (folder / "cgroup.procs").read_text().split()
    assert Path(f"/proc/{child.pid}/oom_score_adj").read_text().strip() == str(OOM_SCORE_ADJ)
    try:
        assert child.wait(timeout=scaled(30)) == -signal.SIGKILL  # the kernel's, not ours
        assert enforced.tripped()
        peak = enforced.peak()
        assert peak is not None and LIMIT * 0.9 <= peak <= LIMIT
        outcome = memory_limit.outcome(enforced, "a test's")
        assert outcome.error_code == "out_of_memory" and not outcome.retryable
        assert f"limit {LIMIT // MIB} MiB" in (outcome.error or "")
        assert "cgroup v1" in (outcome.error or "")
    finally:
        child.kill()
        enforced.close()
    assert not folder.exists()


@pytest.mark.skipif(cgroup_v1.parent_group() is None, reason="no writable cgroup v1 memory")
def test_closing_kills_what_the_child_left_in_its_group_and_removes_it() -> None:
    """A DDP rank that outlives its launcher (SIGKILLed) is in the group too: closing ends it."""
    # The launcher starts its rank only once it is in the group (a process joins its parent's
    # group when it starts): started before, the rank would stay outside it.
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "sys.stdin.readline()\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print('ready', flush=True); time.sleep(60)",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    started = memory_limit.start(settings(), "job-left", 1, LIMIT, launcher.pid)
    assert started is not None and isinstance(started[0], CgroupV1)
    enforced = started[0]
    assert launcher.stdin is not None
    launcher.stdin.write(b"go\n")
    launcher.stdin.flush()
    assert launcher.stdout is not None and launcher.stdout.readline() == b"ready\n"
    launcher.kill()
    launcher.wait()
    rank = [int(p) for p in (enforced.folder / "cgroup.procs").read_text().split()]
    assert len(rank) == 1  # the launcher's child, still alive
    enforced.close()
    assert not enforced.folder.exists() and not alive(rank[0])


def alive(pid: int) -> bool:
    """Running: not gone, and not a zombie its new parent has yet to reap."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_watchdog_kills_the_child_over_its_limit_when_forced() -> None:
    child = greedy()
    started = memory_limit.start(settings(job_memory_limit="watchdog"), "job-w", 1, None, child.pid)
    assert started is None  # no estimate, no fixed figure: no limit, but still first to go
    assert Path(f"/proc/{child.pid}/oom_score_adj").read_text().strip() == str(OOM_SCORE_ADJ)
    forced = settings(job_memory_limit="watchdog", job_memory_limit_bytes=LIMIT)
    started = memory_limit.start(forced, "job-w", 1, None, child.pid)
    assert started is not None and isinstance(started[0], Watchdog)
    enforced = started[0]
    try:
        while child.poll() is None and not enforced.poll():
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=0.05)  # the supervisor's look, a little more often
        assert child.wait(timeout=scaled(10)) == -signal.SIGKILL
        assert enforced.tripped()
        peak = enforced.peak()
        assert peak is not None and LIMIT < peak < LIMIT + 100 * MIB
    finally:
        child.kill()
        enforced.close()


def fake_v2(root: Path, controllers: str, subtree: str) -> Path:
    own = root / "system.slice" / "epochal.service"
    own.mkdir(parents=True)
    (root / "cgroup.controllers").write_text(controllers)
    (own / "cgroup.subtree_control").write_text(subtree)
    (root / "self-cgroup").write_text("0::/system.slice/epochal.service\n")
    return own


def test_cgroup_v2_uses_the_workers_own_group_where_it_delegates_memory(tmp_path: Path) -> None:
    own = fake_v2(tmp_path, "cpuset cpu io memory pids\n", "memory pids\n")
    assert cgroup_v2.parent_group(tmp_path, tmp_path / "self-cgroup") == own


def test_cgroup_v2_uses_the_parent_where_the_worker_runs_in_a_leaf_of_its_group(
    tmp_path: Path,
) -> None:
    """The own group holds the worker's processes and cannot hand memory down (here: its
    control file cannot be written); its parent, the delegated group, can."""
    own = fake_v2(tmp_path, "cpuset cpu io memory pids\n", "memory pids\n")
    leaf = own / "supervisor"
    (leaf / "cgroup.subtree_control").mkdir(parents=True)  # any write to it fails
    (tmp_path / "self-cgroup").write_text("0::/system.slice/epochal.service/supervisor\n")
    assert cgroup_v2.parent_group(tmp_path, tmp_path / "self-cgroup") == own


def test_cgroup_v2_is_passed_over_without_its_memory_controller(tmp_path: Path) -> None:
    fake_v2(tmp_path, "cpuset cpu io pids\n", "pids\n")
    assert cgroup_v2.parent_group(tmp_path, tmp_path / "self-cgroup") is None


def test_cgroup_v1_is_passed_over_where_the_box_has_no_v1_memory(tmp_path: Path) -> None:
    (tmp_path / "self-cgroup").write_text("4:memory:/a\n")
    assert cgroup_v1.parent_group(tmp_path, tmp_path / "self-cgroup") is None


def test_a_group_left_by_a_dead_worker_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = tmp_path / f"{PREFIX}{dead.pid}-job-1"
    live = tmp_path / f"{PREFIX}{os.getpid()}-job-1"
    left.mkdir(), live.mkdir()
    sweep_stale(tmp_path)
    assert not left.exists() and live.exists()


# Once in its group (a line on stdin), holds 60 MiB of its own, then reads a file through the
# page cache and waits.
READER = (
    "import sys, time\n"
    "sys.stdin.readline()\n"
    "held = bytearray(60 * 2**20)\n"
    "with open(sys.argv[1], 'rb') as f:\n"
    "    while f.read(2**20):\n"
    "        pass\n"
    "print('read', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.mark.skipif(cgroup_v1.parent_group() is None, reason="no writable cgroup v1 memory")
def test_a_cgroup_peak_is_the_groups_own_memory_not_the_page_cache_it_reads(
    tmp_path: Path,
) -> None:
    """A file of twice the limit read through the page cache: the kernel charges the group
    for its pages and reclaims them, so the child lives, and its peak is what it holds."""
    data = tmp_path / "data.bin"
    with data.open("wb") as out:
        for _ in range(2 * LIMIT // MIB):
            out.write(os.urandom(MIB))
        out.flush()
        os.fsync(out.fileno())
        os.posix_fadvise(out.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # the child reads it in
    child = subprocess.Popen(
        [sys.executable, "-c", READER, str(data)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    started = memory_limit.start(settings(), "job-cache", 1, LIMIT // 2, child.pid)
    assert started is not None and isinstance(started[0], CgroupV1)
    enforced = started[0]
    try:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(b"go\n")
        child.stdin.flush()
        os.set_blocking(child.stdout.fileno(), False)
        said = b""
        while b"read" not in said:  # the supervisor's looks, until the child has read it all
            assert child.poll() is None, "the child was killed"
            assert not enforced.poll()
            said += child.stdout.read() or b""
            time.sleep(0.05)
        enforced.poll()
        peak = enforced.peak()
        charged = enforced.charged_peak()
        assert not enforced.tripped()
        assert peak is not None and 60 * MIB <= peak < 100 * MIB, peak
        assert charged is not None and charged > peak + 50 * MIB  # the cache was charged
    finally:
        child.kill()
        child.wait()
        enforced.close()
