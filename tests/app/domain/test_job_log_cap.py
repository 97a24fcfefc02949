"""EPOCHAL_MAX_LOG_BYTES: a job.log past the cap keeps its newest half, with writers still on."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from app.domain.job_files import JobFiles
from app.domain.job_log import cap_log, tail_lines

CAP = 64 * 1024


def test_a_log_under_the_cap_is_left_alone(tmp_path: Path) -> None:
    log = JobFiles(tmp_path).log
    log.write_bytes(b"x\n" * 100)
    assert cap_log(log, CAP) == 0 and log.stat().st_size == 200
    assert cap_log(log, 0) == 0  # 0: no cap


def test_the_newest_half_is_kept_while_the_child_appends(tmp_path: Path) -> None:
    log = JobFiles(tmp_path).log
    log.write_bytes(b"".join(b"old line %06d\n" % i for i in range(20_000)))  # ~320 KB
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)  # as the child's stdout
    stop, written = threading.Event(), []
    line_bytes = len(b"new line %06d\n" % 0)  # 16: the bound below counts whole lines

    def child() -> None:
        n = 0
        while True:  # the last line is written after the cap (and its note) surely ended
            last = stop.is_set() and n >= 100
            os.write(fd, b"new line %06d\n" % n)
            written.append(n)
            n += 1
            if last:
                return

    writer = threading.Thread(target=child)
    writer.start()
    try:
        dropped = cap_log(log, CAP)
    finally:
        stop.set()
        writer.join()
        os.close(fd)
    assert dropped > 200_000
    size = log.stat().st_size
    assert size < CAP + line_bytes * len(written) + 200, size  # the kept half plus what came since
    lines, _ = tail_lines(log, 10_000)
    assert lines[-1] == f"new line {written[-1]:06d}"  # appends after the cap landed at the end
    assert any("dropped the oldest" in line for line in lines)
    assert not any(line.startswith("old line 000000") for line in lines)
    assert "old line 019999" in lines or lines[0].startswith("new line")  # the newest old ones


def test_a_missing_log_is_not_an_error(tmp_path: Path) -> None:
    assert cap_log(JobFiles(tmp_path).log, CAP) == 0


def test_without_collapse_range_the_tail_is_copied_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.domain import job_log

    monkeypatch.setattr(job_log, "_collapse", lambda fd, drop: 0)  # as on tmpfs or overlayfs
    log = JobFiles(tmp_path).log
    log.write_bytes(b"".join(b"line %06d\n" % i for i in range(20_000)))
    assert cap_log(log, CAP) > 0
    lines, _ = tail_lines(log, 10_000)
    assert log.stat().st_size <= CAP // 2 + 200
    assert lines[0].startswith("line ") and len(lines[0]) == 11  # cut at a line boundary
    assert lines[-2] == "line 019999" and "dropped the oldest" in lines[-1]
