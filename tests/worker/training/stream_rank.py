"""`python -m tests.worker.training.stream_rank FRAMEWORK REPLICAS RANK STORE WORKDIR [KILL]`

One rank of a PyTorch job, or the one process of a TensorFlow job's replicas, streaming the
sharded data set `shards-1` from the directory store STORE (see test_streamed_ranks), resuming
from WORKDIR's checkpoint if there is one. It writes the sample ids of every batch it trained
on (ids-rankR-N.json, N counting the attempts), and rank 0 the epochs' rows and the final
weights. With KILL, after that global step (and its checkpoint) the process SIGKILLs itself.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np

from app.storage.directory import DirectoryStore
from tests.worker.training.inprocess import KillAtStep, make_spec, run_spec
from worker.child.launch import exit_now
from worker.training.backend import Placement
from worker.training.data.stream import Batch

SPEC: dict[str, Any] = {
    "dataset": {"id": "shards-1", "validation_split": 0.2},
    "model": {"hidden_units": [16], "dropout": 0.3},
    "training": {"epochs": 2, "batch_size": 16},
    "checkpoint_every_steps": 4,
}


def main(
    framework: str, replicas: int, rank: int, store: Path, workdir: Path, kill: int | None
) -> None:
    package = {"pytorch": "torch", "tensorflow": "tf"}[framework]
    streamed = importlib.import_module(f"worker.training.{package}.streamed")
    seen: list[dict[str, Any]] = []
    attempt = len(list(workdir.glob(f"ids-rank{rank}-*.json")))
    out = workdir / f"ids-rank{rank}-{attempt}.json"
    names = vars(streamed)  # the back-end's module globals: its prepare_batch is wrapped
    prepare = names["prepare_batch"]

    def recording(batch: Batch, data: Any) -> np.ndarray:
        seen.append({"epoch": batch.epoch, "step": batch.index, "ids": batch.ids.tolist()})
        out.write_text(json.dumps(seen))  # before the step: a SIGKILL may follow it
        return prepare(batch, data)

    names["prepare_batch"] = recording
    spec = make_spec(framework, **SPEC, resources={"replicas": replicas})
    placement = Placement(
        replicas=replicas, rank=rank, threads=1 if framework == "pytorch" else None
    )
    sigkill = lambda: os.kill(os.getpid(), signal.SIGKILL)  # noqa: E731
    extra = [KillAtStep(kill, sigkill)] if kill is not None else []
    run = run_spec(spec, workdir, *extra, data_store=DirectoryStore(store), placement=placement)
    if rank == 0:
        (workdir / f"rows-{attempt}.json").write_text(json.dumps(run.rows))
        np.savez(workdir / "weights.npz", *run.weights)


if __name__ == "__main__":
    args = sys.argv[1:]
    kill = int(args[5]) if len(args) > 5 else None
    main(args[0], int(args[1]), int(args[2]), Path(args[3]), Path(args[4]), kill)
    exit_now(0)
