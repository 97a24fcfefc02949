"""The training child catches a stop signal from its first import on, not only once it trains.

SIGUSR1's default action kills a process; a stop sent while the child is still importing or
reading its settings must become a stop request, never a death without an outcome.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from app.domain.job_files import JobFiles

EARLY_SIGNAL = """
import os, sys
from pathlib import Path
import worker.child.launch as launch
from app.domain.job_files import JobFiles
from worker.protocol import STOP_SIGNAL
from worker.training.callbacks import TrainState
os.kill(os.getpid(), STOP_SIGNAL)  # before the loop's handler exists
state = TrainState(epochs=3, learning_rate=0.1)
launch.listen_for_stop(state, JobFiles(Path(sys.argv[1])), 1)
print(state.stop_reason, state.interrupt)
"""


def test_a_stop_signal_before_the_handler_becomes_a_stop_request(tmp_path: Path) -> None:
    JobFiles(tmp_path).stop_request(1).write_text("timeout")
    done = subprocess.run(
        [sys.executable, "-c", EARLY_SIGNAL, str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["timeout", "timeout"]


def test_the_catcher_comes_before_anything_slow() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import worker.child.launch"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    order = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line]
    first = order.index("worker.child.early_stop")
    for slow in ("numpy", "pydantic", "app.core.config", "worker.training.callbacks"):
        assert order.index(slow) > first, f"{slow} is imported before the stop catcher"
