"""A gang member's job log reaches the database: whole lines only, from where the attempt
started, again after a failed send, past a cap that cut the log's head, past a line longer than
one read (cut, marked), and a bounded number of lines a send."""

from __future__ import annotations

from pathlib import Path

from app.core.db import session_scope
from app.domain import crud, rank_log
from app.domain.job_log import MAX_LINE_CHARS, MAX_TAIL_BYTES, append_line, cap_log
from app.schemas.job_spec import JobSpec
from worker.supervisor.log_shipper import CUT_MARKER, MAX_SHIP_LINES, LogShipper


def gang_job() -> str:
    spec = JobSpec.model_validate(
        {"framework": "pytorch", "dataset": {"name": "digits"}, "resources": {"nodes": 2}}
    )
    with session_scope() as session:
        return crud.create_job(session, spec, "gpus-0").id


def shipped(job_id: str) -> list[str]:
    with session_scope() as session:
        return rank_log.tail(session, job_id, 1, 1000)[0]


def test_whole_lines_from_the_attempts_start_are_shipped_once(
    db_env: dict[str, str], tmp_path: Path
) -> None:
    job_id = gang_job()
    log = tmp_path / "job.log"
    log.write_text("an earlier attempt's line\n")
    shipper = LogShipper(job_id, 1, log)
    with log.open("a") as f:
        f.write("gang node 1 of 2\nhalf a li")
    shipper.ship()
    assert shipped(job_id) == ["gang node 1 of 2"]
    with log.open("a") as f:
        f.write("ne\n")
    shipper.ship()
    shipper.ship()
    assert shipped(job_id) == ["gang node 1 of 2", "half a line"]


def test_a_capped_log_goes_on_from_its_first_unsent_line(
    db_env: dict[str, str], tmp_path: Path
) -> None:
    job_id = gang_job()
    log = tmp_path / "job.log"
    shipper = LogShipper(job_id, 1, log)
    with log.open("a") as f:
        f.write("".join(f"{i:04d} {'x' * 60}\n" for i in range(100)))
    shipper.ship()
    with log.open("a") as f:
        f.write("unsent when the cap came\n")
    shipper.dropped(cap_log(log, 4000))
    append_line(log, "after the cap")
    shipper.ship()
    lines = shipped(job_id)
    assert [line.split()[0] for line in lines[:100]] == [f"{i:04d}" for i in range(100)]
    assert lines[100] == "unsent when the cap came"
    assert "dropped the oldest" in lines[101] and lines[102].endswith("after the cap")
    assert len(lines) == 103


def test_a_line_longer_than_one_read_goes_cut_and_the_lines_after_it_follow(
    db_env: dict[str, str], tmp_path: Path
) -> None:
    job_id = gang_job()
    log = tmp_path / "job.log"
    shipper = LogShipper(job_id, 1, log)
    with log.open("a") as f:
        f.write("before\n" + "x" * (MAX_TAIL_BYTES + MAX_TAIL_BYTES // 2) + "\nafter\n")
    for _ in range(3):  # one read a heartbeat; the long line takes two
        shipper.ship()
    lines = shipped(job_id)
    assert lines[0] == "before" and lines[2] == "after" and len(lines) == 3
    assert lines[1].startswith("xxx") and lines[1].endswith(CUT_MARKER)
    assert len(lines[1]) == MAX_LINE_CHARS


def test_one_send_takes_at_most_max_ship_lines(db_env: dict[str, str], tmp_path: Path) -> None:
    job_id = gang_job()
    log = tmp_path / "job.log"
    shipper = LogShipper(job_id, 1, log)
    log.write_text("".join(f"{i}\n" for i in range(MAX_SHIP_LINES + 10)))
    shipper.ship()
    assert shipped(job_id)[-1] == str(MAX_SHIP_LINES - 1)
    shipper.ship()
    assert shipped(job_id)[-1] == str(MAX_SHIP_LINES + 9)
