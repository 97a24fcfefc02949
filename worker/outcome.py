"""What a training child reports to its supervisor: a small JSON file per attempt."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Failures a new attempt could fix are retried within max_restarts; the rest are final (P3).
RETRYABLE = frozenset({"worker_lost", "infrastructure", "child_killed"})


@dataclass
class Outcome:
    status: str  # succeeded | failed | cancelled
    stop_reason: str
    error_code: str | None = None
    error: str | None = None
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def retryable(self) -> bool:
        return self.status == "failed" and self.error_code in RETRYABLE

    @classmethod
    def failure(cls, code: str, message: str, stop_reason: str = "error") -> Outcome:
        return cls("failed", stop_reason, error_code=code, error=message)


def outcome_path(workdir: Path, attempt: int) -> Path:
    return workdir / f"outcome-{attempt}.json"


def write_outcome(workdir: Path, attempt: int, outcome: Outcome) -> None:
    path = outcome_path(workdir, attempt)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(outcome)))
    os.replace(tmp, path)


def read_outcome(workdir: Path, attempt: int) -> Outcome | None:
    path = outcome_path(workdir, attempt)
    if not path.exists():
        return None
    return Outcome(**json.loads(path.read_text()))
