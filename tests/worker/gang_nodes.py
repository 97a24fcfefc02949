"""Two nodes of a multi-node job started by the supervisor's own start_child on one shared
artifacts directory (production: every worker mounts the same storage), each with a short
stand-in for the training process: tests/worker/test_member_logs.py, test_shared_job_folder.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.core.config import Settings, get_settings
from app.domain.tables import utcnow
from app.schemas.job_spec import JobSpec
from worker.protocol import GangNode
from worker.supervisor.attempt import Attempt
from worker.supervisor.gang_seat import Formed
from worker.supervisor.runner import start_child


def stand_in_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str) -> Settings:
    """Settings whose training process is `code` (run as `child -m MODULE JOB_ID ...`)."""
    child = tmp_path / "child"
    child.write_text(f"#!{sys.executable}\n{code}")
    child.chmod(0o755)
    monkeypatch.setenv("EPOCHAL_PYTORCH_PYTHON", str(child))
    monkeypatch.setenv("EPOCHAL_WARM_FRAMEWORKS", "")
    get_settings.cache_clear()
    return get_settings()


def start_node(settings: Settings, job_id: str, spec: JobSpec, rank: int) -> Attempt:
    """Node `rank` of the 2-node gang's attempt 1, started as the runner starts it."""
    node = GangNode(rank, 2, "tcp://127.0.0.1:29500")
    formed = Formed(job_id, 1, spec, utcnow(), node, f"w{rank}")
    attempt = start_child(settings, job_id, 1, spec, 600, formed)
    assert attempt.process.wait(timeout=60) == 0
    return attempt
