"""One global batch, one replica or two: the same step (RELIABILITY.md P19, P20, P30).

The TensorFlow seed sums per-replica losses that were already averaged per replica and adds L2
on every replica, so its two-replica step differs from its one-replica step; these tests fail
on that code. Real replicas on CPU: two logical devices under MirroredStrategy, and two gloo
processes under DDP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.domain.job_files import JobFiles
from tests.helpers import free_port, scaled
from worker.protocol import DDP_INIT_ENV, GANG_PEERS_ENV

ROOT = Path(__file__).resolve().parents[3]


def start(
    framework: str, replicas: int, rank: int, out: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "tests.worker.training.replica_step"]
    argv += [framework, str(replicas), str(rank), str(out)]
    return subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **env, "OMP_NUM_THREADS": "1"})


def run(framework: str, replicas: int, tmp_path: Path, nodes: int = 1) -> dict[str, np.ndarray]:
    """Run the step with `replicas` (one process per DDP rank, or per TensorFlow gang node)
    and load rank 0's result."""
    out = tmp_path / f"{framework}-{replicas}-{nodes}.npz"
    env = {DDP_INIT_ENV: f"file://{tmp_path}/store-{replicas}"}
    if nodes > 1:  # a TensorFlow gang on this host: a server per node, as seats publish them
        env[GANG_PEERS_ENV] = ",".join(f"127.0.0.1:{free_port()}" for _ in range(nodes))
    ranks = replicas if framework == "pytorch" or nodes > 1 else 1
    procs = [start(framework, replicas, rank, out, env) for rank in range(ranks)]
    for proc in procs:
        assert proc.wait(timeout=scaled(120)) == 0
    with np.load(out) as data:
        return dict(data)


@pytest.mark.parametrize(
    ("framework", "nodes"), [("pytorch", 1), ("tensorflow", 1), ("tensorflow", 2)]
)
def test_two_replicas_take_the_same_step_as_one(framework: str, nodes: int, tmp_path: Path) -> None:
    """Two replicas in one process or over two nodes (MultiWorkerMirroredStrategy, which also
    agrees on a value and sums numbers first)."""
    one, two = run(framework, 1, tmp_path), run(framework, 2, tmp_path, nodes)
    weights = sorted(k for k in one if k.startswith("w"))
    assert weights and weights == sorted(k for k in two if k.startswith("w"))
    for key in weights:
        np.testing.assert_allclose(one[key], two[key], atol=1e-5, err_msg=key)
    loss, samples, val_loss, val_accuracy = two["scores"]
    assert samples == 128 and loss == pytest.approx(one["scores"][0], rel=1e-5)
    # validation is reduced over the whole split (43 samples), not averaged per rank
    assert [val_loss, val_accuracy] == pytest.approx(list(one["scores"][2:]), rel=1e-5)


def test_a_loss_gone_non_finite_on_one_ddp_rank_stops_both(tmp_path: Path) -> None:
    """RELIABILITY.md P31 under DDP: rank 1 alone sees an infinite input; both ranks stop at
    the same step boundary, neither hangs in a collective, no checkpoint is written."""
    env = {**os.environ, DDP_INIT_ENV: f"file://{tmp_path}/store", "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "tests.worker.training.ddp_attempt"]
    procs = [
        subprocess.Popen([*argv, str(rank), str(tmp_path)], cwd=ROOT, env=env) for rank in (0, 1)
    ]
    assert [proc.wait(timeout=scaled(120)) for proc in procs] == [0, 0]
    for rank in (0, 1):
        outcome = json.loads((tmp_path / f"outcome-rank{rank}.json").read_text())
        assert (outcome["status"], outcome["stop_reason"]) == ("failed", "non_finite_loss")
        assert "epoch 1, step 3;" in outcome["error"]  # the step agreed by both ranks
    assert not JobFiles(tmp_path).checkpoints.exists()
