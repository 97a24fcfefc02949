"""Two nodes of a multi-node job on one shared artifacts directory (production: every worker
mounts the same storage) use one job folder: member 1, started late with the supervisor's own
start_child, leaves rank 0's spec, stop request, progress and outcome as they were, and its
child reads the spec and stop request its own supervisor wrote (JobFiles.own)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.core.config import Settings
from app.core.db import session_scope
from app.domain import crud
from app.domain.job_files import JobFiles
from app.domain.states import StopReason
from app.schemas.api import StepProgress
from app.schemas.job_spec import JobSpec
from tests.worker.gang_nodes import stand_in_child, start_node
from worker.protocol import (
    Outcome,
    read_progress,
    read_stop_reason,
    request_stop,
    write_outcome,
    write_progress,
)
from worker.supervisor.job_end import outcome_of

# The training process's part: it finds its node's files as the real child does, and says
# which spec it reads (argv: -m MODULE JOB_ID --attempt N ...).
CHILD = """import sys
from app.core.config import get_settings
from worker.child.launch import node_files
files = node_files(get_settings().resolved_artifacts_dir, sys.argv[3])
print("spec from", files.spec.relative_to(files.root), files.spec.read_text()[:1], flush=True)
"""


@pytest.fixture
def settings(db_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Both nodes' settings: one artifacts directory; the child is a short stand-in script."""
    return stand_in_child(tmp_path, monkeypatch, CHILD)


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Each file directly in `folder` but the logs (each node's grows): inode, mtime, bytes."""
    return {
        p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
        for p in folder.iterdir()
        if p.is_file() and p.suffix != ".log"
    }


def test_a_late_member_leaves_rank_0s_files_alone(settings: Settings) -> None:
    spec = JobSpec.model_validate(
        {"framework": "pytorch", "dataset": {"name": "digits"}, "resources": {"nodes": 2}}
    )
    with session_scope() as session:
        job_id = crud.create_job(session, spec, "gpus-0").id
    rank0 = start_node(settings, job_id, spec, 0)
    # Meanwhile rank 0's child reports progress, a cancel comes, and the child reports its end.
    progress = StepProgress(epoch=1, step=7, steps=50)
    write_progress(rank0.files, 1, progress)
    request_stop(rank0.files, 1, StopReason.cancelled)
    write_outcome(rank0.files, 1, Outcome.stopped(StopReason.cancelled, None))
    files = JobFiles.of(settings.resolved_artifacts_dir, job_id)
    before = snapshot(files.root)
    assert set(before) == {"spec.json", "progress-1.json", "stop-1", "outcome-1.json"}

    member1 = start_node(settings, job_id, spec, 1)  # the late member, on the same folder
    request_stop(member1.files, 1, StopReason.shutdown)  # its own worker shuts down

    assert snapshot(files.root) == before
    assert read_stop_reason(rank0.files, 1, StopReason.timeout) == StopReason.cancelled
    assert read_progress(rank0.files, 1) == progress
    assert outcome_of(rank0).stop_reason == StopReason.cancelled  # the child's own report
    assert JobSpec.model_validate_json(files.spec.read_text()) == spec
    own = member1.files
    assert own.own == files.root / "member-1" and own.spec.is_file()
    assert read_stop_reason(own, 1, StopReason.timeout) == StopReason.shutdown
    assert read_progress(own, 1) is None and not own.outcome(1).exists()
    assert sorted(os.listdir(own.own)) == ["spec.json", "stop-1"]  # nothing half-written left
    # Each node's child read the spec its own supervisor wrote.
    assert "spec from spec.json {" in files.log.read_text()
    assert "spec from member-1/spec.json {" in files.rank_log(1).read_text()
