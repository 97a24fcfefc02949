"""`python -m tests.worker.training.ddp_attempt RANK WORKDIR`: one rank of a 2-rank DDP attempt
whose loss turns non-finite on rank 1 only (its half of global batch 3 is poisoned)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from tests.worker.training.inprocess import EMPTY_DATA_DIR, make_spec
from worker.child.launch import exit_now
from worker.child.train_attempt import run_attempt
from worker.training.backend import Placement, create_backend
from worker.training.callbacks import TrainState
from worker.training.data import epoch_order, load_splits

BATCH, POISONED_STEP = 32, 3
SPEC = make_spec(
    "pytorch",
    task="regression",
    dataset={"name": "synthetic", "samples": 400, "features": 8},
    training={"epochs": 3, "batch_size": BATCH},
    resources={"replicas": 2},
)


def main(rank: int, workdir: Path) -> None:
    splits = load_splits(SPEC, EMPTY_DATA_DIR)
    if rank == 1:
        order = epoch_order(len(splits.x_train), SPEC.training.seed, 0, shuffle=True)
        begin = (POISONED_STEP - 1) * BATCH + BATCH // 2  # rank 1's half of that batch
        splits.x_train[order[begin : begin + BATCH // 2]] = np.inf
    backend = create_backend(SPEC, splits, Placement(replicas=2, rank=rank, threads=1))
    try:
        state = TrainState(epochs=SPEC.training.epochs, learning_rate=SPEC.optimizer.learning_rate)
        outcome = run_attempt(SPEC, workdir, backend, splits, state)
    finally:
        backend.close()
    (workdir / f"outcome-rank{rank}.json").write_text(json.dumps(asdict(outcome)))


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
    # As a training child leaves: the interpreter's teardown of torch's gloo threads can abort
    # ("terminate called without an active exception") in a few runs in twenty.
    exit_now(0)
