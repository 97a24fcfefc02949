"""Exceptions in the training child map to failure codes; the codes decide retries; an early
stop ends an attempt the same way whichever side finds out; the hand-over message round-trips;
a gang node's agreed stop is a clean end."""

from __future__ import annotations

import errno
from datetime import UTC, datetime

import pytest
from sqlalchemy.exc import OperationalError

from app.core.config import get_settings
from app.domain.states import ErrorCode, StopReason
from worker.child.launch import classify
from worker.child.sinks import LostOwnership
from worker.protocol import STOPPED, Assignment, GangNode, JobConfigError, Outcome
from worker.supervisor.gang_seat import Formed, settle


@pytest.mark.parametrize(
    ("exc", "code", "retryable"),
    [
        (MemoryError(), "out_of_memory", False),
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "out_of_memory", False),
        (JobConfigError("model cnn needs image samples"), "invalid_config", False),
        (ValueError("something unexpected"), "internal_error", False),
        (LostOwnership("attempt 1 is no longer running here"), "worker_lost", True),
        (OperationalError("SELECT 1", {}, Exception("server closed")), "infrastructure", True),
        (OSError(errno.ENOSPC, "No space left on device"), "disk_full", False),
        (OSError(errno.ENOENT, "No such file"), "internal_error", False),
    ],
)
def test_failure_codes(exc: BaseException, code: str, retryable: bool) -> None:
    outcome = classify(exc)
    assert (outcome.status, outcome.error_code, outcome.retryable) == ("failed", code, retryable)
    assert outcome.error  # a message for the user, never empty


@pytest.mark.parametrize(
    ("reason", "status", "code", "retryable"),
    [
        ("cancelled", "cancelled", None, False),
        ("timeout", "failed", "timeout", False),
        ("shutdown", "failed", "worker_shutdown", True),  # nobody's failure: re-queued
        ("non_finite_loss", "failed", "non_finite_loss", False),
    ],
)
def test_an_early_stop_ends_the_attempt_by_its_reason(
    reason: str, status: str, code: str | None, retryable: bool
) -> None:
    outcome = Outcome.stopped(StopReason(reason), "what happened")
    assert (outcome.status, outcome.stop_reason, outcome.error_code) == (status, reason, code)
    assert outcome.retryable == retryable and outcome.error == "what happened"


def test_every_stop_the_supervisor_asks_for_has_an_end() -> None:
    # The reasons the supervisor writes into a stop request (worker.supervisor.runner).
    assert {StopReason.cancelled, StopReason.timeout, StopReason.shutdown} <= set(STOPPED)


def test_the_assignment_is_one_line_that_reads_back() -> None:
    sent = Assignment("0b7c-job", 3, 1234.5)
    line = sent.encode()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert Assignment.decode(line) == sent
    assert Assignment.decode(line.decode()) == sent  # as the child reads it from stdin


def test_a_gang_nodes_agreed_stop_is_a_clean_end_that_rank_0_keeps() -> None:
    """A gang's other nodes report by exit code: an agreed preemption or shutdown stop is clean
    (their seat ends done), and rank 0 keeps it even when another rank's end looks like a loss."""
    clean = {reason: Outcome.stopped(reason, "stopped").clean for reason in STOPPED}
    assert {reason for reason, yes in clean.items() if yes} == {
        StopReason.cancelled,
        StopReason.shutdown,
        StopReason.preempted,
    }
    node = GangNode(0, 2, "tcp://127.0.0.1:1", ("127.0.0.1:1", "127.0.0.1:2"))
    formed = Formed("job", 1, {}, datetime.now(UTC), node, "w1")
    stop = Outcome.stopped(StopReason.preempted, "stopped after epoch 3 of 12")
    assert settle(get_settings(), formed, stop, "node 1 (w2) lost its training process") is stop
    broke = Outcome.failure(ErrorCode.internal_error, "gloo: connection closed")
    lost = settle(get_settings(), formed, broke, "node 1 (w2) lost its training process")
    assert lost.error_code == ErrorCode.worker_lost
