"""Each framework's training processes run on the interpreter set for it (EPOCHAL_PYTORCH_PYTHON,
EPOCHAL_TENSORFLOW_PYTHON): the worker image keeps each framework in an environment of its own,
apart from the worker's (Dockerfile, tests/packaging/test_worker_image.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.core.config import Settings, get_settings
from tests.helpers import wait_until
from tests.worker.test_threads import run_to_end, spec


def test_no_setting_means_the_workers_own_interpreter() -> None:
    settings = Settings(pytorch_python="/opt/pytorch/bin/python")
    assert settings.python_for("pytorch") == "/opt/pytorch/bin/python"
    assert settings.python_for("tensorflow") is None


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_the_job_trains_on_its_frameworks_interpreter(
    sqlite_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, warm: bool
) -> None:
    # An interpreter that notes each command line it runs, then is the real one.
    calls, python = tmp_path / "calls", tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    monkeypatch.setenv("EPOCHAL_PYTORCH_PYTHON", str(python))
    monkeypatch.setenv("EPOCHAL_WARM_FRAMEWORKS", "pytorch" if warm else "")
    get_settings.cache_clear()
    from worker.supervisor.standby import POOL, warm_up

    settings = get_settings()
    try:
        if warm:
            warm_up(settings, ["pytorch"])
        run_to_end(settings, spec("pytorch"))
        if warm:  # the next child is started as the job ends: its line, before it is killed
            wait_until(lambda: len(calls.read_text().splitlines()) >= 2, 30, "the next child")
    finally:
        POOL.close()
    lines = calls.read_text().splitlines()
    if warm:  # the child that took the job, and the next one, started as it ended
        assert lines == ["-m worker.child.launch --standby pytorch"] * 2, lines
    else:
        assert len(lines) == 1 and lines[0].startswith("-m worker.child.launch "), lines
        assert "--attempt 1 --threads " in lines[0]
