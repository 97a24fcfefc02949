"""Two nodes of a multi-node job on one shared artifacts directory (production: every worker
mounts the same storage) each write a log of their own: rank 0's job.log holds only rank 0's
lines, and member 1's shipped rows only member 1's, through the supervisor's own functions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.core.config import Settings
from app.core.db import session_scope
from app.domain import crud, rank_log
from app.domain.job_files import JobFiles
from app.domain.job_log import cap_log
from app.domain.retention import remove_job_files
from app.schemas.job_spec import JobSpec
from tests.worker.gang_nodes import stand_in_child, start_node
from worker.supervisor.attempt import note
from worker.supervisor.job_end import record_end

# The training process's part: it prints to stdout, which the supervisor points at the log.
CHILD = "import os\nprint('child of node', os.environ['EPOCHAL_GANG_NODE'], flush=True)\n"


@pytest.fixture
def settings(db_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Both nodes' settings: one artifacts directory; the child is a one-line script."""
    return stand_in_child(tmp_path, monkeypatch, CHILD)


def test_each_node_writes_and_ships_only_its_own_lines(settings: Settings) -> None:
    spec = JobSpec.model_validate(
        {"framework": "pytorch", "dataset": {"name": "digits"}, "resources": {"nodes": 2}}
    )
    with session_scope() as session:
        job_id = crud.create_job(session, spec, "gpus-0").id
    rank0, member1 = (start_node(settings, job_id, spec, rank) for rank in (0, 1))
    assert rank0.shipper is None and member1.shipper is not None
    note(rank0, "rank 0's note")
    note(member1, "member 1's note")
    member1.shipper.ship()  # then the cap, as each heartbeat does; it notes it in the file
    member1.shipper.dropped(cap_log(member1.log, 200))
    member1.shipper.ship()

    files = JobFiles.of(settings.resolved_artifacts_dir, job_id)
    own = files.log.read_text()
    assert "gang node 0 of 2" in own and "child of node 0,2" in own and "rank 0's note" in own
    assert "node 1" not in own and "member" not in own and "passed 200 bytes" not in own
    with session_scope() as session:
        shipped = "\n".join(rank_log.tail(session, job_id, 1, 1000)[0])
    assert "gang node 1 of 2" in shipped and "child of node 1,2" in shipped
    assert "member 1's note" in shipped and "member-1.log passed 200 bytes" in shipped
    assert "node 0" not in shipped and "rank 0" not in shipped

    assert member1.log == files.rank_log(1) != files.log == rank0.log
    remove_job_files(settings.resolved_artifacts_dir, job_id)  # as deleting the job does
    assert not os.path.exists(files.root)


def test_a_members_whole_tail_ships_at_its_end(settings: Settings) -> None:
    """More than one read's worth written after the last heartbeat, the last line unended."""
    spec = JobSpec.model_validate(
        {"framework": "pytorch", "dataset": {"name": "digits"}, "resources": {"nodes": 2}}
    )
    with session_scope() as session:
        job_id = crud.create_job(session, spec, "gpus-0").id
    member1 = start_node(settings, job_id, spec, 1)
    assert member1.shipper is not None
    with member1.log.open("a") as f:
        f.write("".join(f"{i:04d} {'y' * 500}\n" for i in range(3000)) + "the very last")
    member1.lost = True  # the end that ships and leaves (a member's own end does the same)
    record_end(settings, member1)
    with session_scope() as session:
        lines = rank_log.tail(session, job_id, 1, 5000)[0]
    assert lines[-1] == "the very last" and lines[-2].startswith("2999 ")
    assert [line[:4] for line in lines[-3001:-1]] == [f"{i:04d}" for i in range(3000)]
