"""A streamed PyTorch job over two DDP ranks (two gloo processes): every training sample once
per epoch across the ranks, by sample id, in the same global batches as one rank, the same
number of batches on each; and a job SIGKILLed mid-epoch resumes like an uninterrupted run.
A streamed TensorFlow job on two replicas (one process, two logical CPU devices) takes the
one-replica job's global batches, and resumes after a SIGKILL as exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.shards.index import dataset_prefix
from app.storage.directory import DirectoryStore
from tests.helpers import scaled
from tests.shard_data import write_dataset
from worker.protocol import DDP_INIT_ENV

ROOT = Path(__file__).resolve().parents[3]
ROWS = [60, 45, 70, 30, 55, 40]  # 300 samples: 240 to train (15 global batches of 16), 60 held


def run(
    replicas: int, store: Path, workdir: Path, kill: int | None = None, framework: str = "pytorch"
) -> list[int]:
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, DDP_INIT_ENV: f"file://{workdir}/rendezvous", "OMP_NUM_THREADS": "1"}
    (workdir / "rendezvous").unlink(missing_ok=True)
    argv = [sys.executable, "-m", "tests.worker.training.stream_rank", framework, str(replicas)]
    tail = [] if kill is None else [str(kill)]
    procs = [
        subprocess.Popen([*argv, str(rank), str(store), str(workdir), *tail], cwd=ROOT, env=env)
        for rank in range(replicas if framework == "pytorch" else 1)  # TF: one process
    ]
    return [proc.wait(timeout=scaled(180)) for proc in procs]


def batches(workdir: Path, rank: int, attempt: int = 0) -> list[dict]:
    return json.loads((workdir / f"ids-rank{rank}-{attempt}.json").read_text())


@pytest.fixture
def store(tmp_path: Path) -> Path:
    write_dataset(
        DirectoryStore(tmp_path / "store"),
        dataset_prefix("shards-1", "train"),
        ROWS,
        x_shape=(6,),
        classes=3,
    )
    return tmp_path / "store"


@pytest.mark.torch
def test_two_ranks_see_every_sample_once_and_resume_after_sigkill(
    store: Path, tmp_path: Path
) -> None:
    assert run(1, store, tmp_path / "one") == [0]
    assert run(2, store, tmp_path / "two") == [0, 0]
    one = batches(tmp_path / "one", 0)
    ranks = [batches(tmp_path / "two", r) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == 2 * 15  # 2 epochs, 15 steps each on each rank
    for epoch in (0, 1):
        mine = [[b for b in r if b["epoch"] == epoch] for r in ranks]
        ids = [i for r in mine for b in r for i in b["ids"]]
        assert sorted(ids) == list(range(240))  # every training id once, no held-out one
        for step, (a, b) in enumerate(zip(*mine, strict=True)):
            assert a["step"] == b["step"] == step and len(a["ids"]) == len(b["ids"]) == 8
            whole = next(o for o in one if o["epoch"] == epoch and o["step"] == step)
            assert a["ids"] + b["ids"] == whole["ids"]  # the same global batch, cut in two

    # Killed (SIGKILL, both ranks) after step 6, then after step 22: checkpoints at 4 and 20.
    killed = tmp_path / "killed"
    assert run(2, store, killed, kill=6) == [-9, -9]
    assert run(2, store, killed, kill=22) == [-9, -9]
    assert run(2, store, killed) == [0, 0]
    assert batches(killed, 0, 1)[0] == {**batches(tmp_path / "two", 0)[4]}  # step 5: after 4
    whole_rows = json.loads((tmp_path / "two" / "rows-0.json").read_text())
    # Each rank's reader fetches the shards its halves lie in, and the row sums the ranks'.
    alone = json.loads((tmp_path / "one" / "rows-0.json").read_text())[0]["data_cache_misses"]
    assert alone < whole_rows[0]["data_cache_misses"] <= 2 * alone
    resumed_rows = json.loads((killed / "rows-2.json").read_text())
    assert [r["epoch"] for r in resumed_rows] == [2.0]
    for key in ("train_loss", "train_accuracy", "val_loss", "val_accuracy"):
        assert resumed_rows[0][key] == pytest.approx(whole_rows[1][key], rel=1e-6)
    with np.load(tmp_path / "two" / "weights.npz") as a, np.load(killed / "weights.npz") as b:
        for name in a.files:
            np.testing.assert_array_equal(a[name], b[name])


@pytest.mark.tf
def test_two_tensorflow_replicas_take_one_replicas_batches_and_resume(
    store: Path, tmp_path: Path
) -> None:
    assert run(1, store, tmp_path / "one", framework="tensorflow") == [0]
    assert run(2, store, tmp_path / "two", framework="tensorflow") == [0]
    one, two = batches(tmp_path / "one", 0), batches(tmp_path / "two", 0)
    # The same global batches, in order (each cut in two for the replicas); the weights
    # differ by the dropout masks, which each replica draws for itself.
    assert one == two
    killed = tmp_path / "killed"
    assert run(2, store, killed, kill=6, framework="tensorflow") == [-9]
    assert run(2, store, killed, framework="tensorflow") == [0]
    rows = json.loads((tmp_path / "two" / "rows-0.json").read_text())
    again = json.loads((killed / "rows-1.json").read_text())
    assert [r["train_loss"] for r in again] == [r["train_loss"] for r in rows]
    with np.load(tmp_path / "two" / "weights.npz") as a, np.load(killed / "weights.npz") as b:
        for name in a.files:
            np.testing.assert_array_equal(a[name], b[name])
