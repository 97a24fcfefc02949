"""Exceptions in the training child map to failure codes; the codes decide retries."""

from __future__ import annotations

import errno

import pytest
from sqlalchemy.exc import OperationalError

from worker.child.launch import classify
from worker.child.sinks import LostOwnership
from worker.protocol import JobConfigError


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
