"""`python -m benchmarks.training.curve SPEC`: train SPEC (a Python literal) in this fresh
process through the worker's own attempt; print per-epoch validation accuracy as RESULT json."""

from __future__ import annotations

import ast
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    from app.schemas.job_spec import JobSpec
    from benchmarks.training.common import DATA_DIR
    from worker.child.train_attempt import run_attempt
    from worker.training.backend import Placement, create_backend
    from worker.training.callbacks import EpochLog, TrainState
    from worker.training.data import load_splits

    spec = JobSpec.model_validate(ast.literal_eval(sys.argv[1]))
    splits = load_splits(spec, DATA_DIR)
    backend = create_backend(spec, splits, Placement())
    log = EpochLog()
    with tempfile.TemporaryDirectory() as workdir:
        state = TrainState(epochs=spec.training.epochs, learning_rate=spec.optimizer.learning_rate)
        run_attempt(spec, Path(workdir), backend, splits, state, [log])
    speeds = [row["samples_per_second"] for row in log.rows]
    result = {
        "val_accuracy": [row["val_accuracy"] for row in log.rows],
        "samples_per_second": sorted(speeds)[len(speeds) // 2],
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
