"""What a checkpoint costs the training path, with the default store against an S3 store.

With the default store the checkpoint's staging folder is the store itself; with an S3 store
(SeaweedFS here, `weed mini` on loopback) the same staging copy is made and a thread of the
training process uploads it as a checkpoint set beside training. So the step's path should pay
the staging copy in both, and the upload should not show in it.

`python -m benchmarks.training.checkpoint_cost [EPOCHS RUNS]` prints a table and `BENCH` lines:
per epoch, the time the loop spent checkpointing (`checkpoint_s`, on the step's path) in each
mode and their ratio, and the S3 mode's upload time (off the path). The residual CNN of
`examples/`, on the first LIMIT Fashion-MNIST images, a checkpoint every epoch, both frameworks
in fresh processes, the modes interleaved.
`python -m benchmarks.training.checkpoint_cost case FRAMEWORK MODE EPOCHS ENDPOINT` is one run.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from statistics import median
from typing import Any

import yaml

from benchmarks.training.suite import bench, run_case

LIMIT = 6016
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "residual-fashion-mnist.yaml"
MODES = ("staging", "s3")


def spec_body(framework: str, epochs: int) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    body["framework"] = framework
    body["dataset"] = {**body["dataset"], "limit": LIMIT}
    body["training"] = {**body["training"], "epochs": epochs}
    body["checkpoint_every_epochs"] = 1
    return body


def case(framework: str, mode: str, epochs: int, endpoint: str) -> dict[str, Any]:
    from app.schemas.job_spec import JobSpec
    from app.storage.s3 import S3Store
    from benchmarks.training.common import DATA_DIR
    from tests.storage_server import BUCKET, CREDENTIALS
    from worker.child.train_attempt import run_attempt
    from worker.training.backend import Placement, create_backend
    from worker.training.callbacks import TrainState
    from worker.training.checkpoint_upload import StoreCheckpoints
    from worker.training.data import load_splits

    spec = JobSpec.model_validate(spec_body(framework, epochs))
    splits = load_splits(spec, DATA_DIR)
    backend = create_backend(spec, splits, Placement())
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as workdir:
        store = None
        if mode == "s3":
            os.environ.update(CREDENTIALS)
            s3 = S3Store(BUCKET, f"bench-{os.getpid()}", endpoint)
            store = StoreCheckpoints(s3, "bench-job", Path(workdir) / "checkpoints")
        state = TrainState(epochs=spec.training.epochs, learning_rate=spec.optimizer.learning_rate)
        run_attempt(spec, Path(workdir), backend, splits, state, [], timings, "bench-job", store)
    backend.close()
    return {
        "checkpoint_s": timings["checkpoint_s"] / epochs,
        "upload_s": timings.get("checkpoint_upload_s", 0.0) / epochs,
        "fit_s": timings["fit_s"] / epochs,
    }


def run(epochs: int, runs: int) -> list[list[str]]:
    from tests.storage_server import start_seaweed

    table: list[list[str]] = []
    with tempfile.TemporaryDirectory() as folder:
        server = start_seaweed(Path(folder) / "weed")
        try:
            for framework in ("pytorch", "tensorflow"):
                results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
                for _ in range(runs):
                    for mode in MODES:
                        args = ("case", framework, mode, epochs, server.endpoint)
                        module = "benchmarks.training.checkpoint_cost"
                        results[mode].append(run_case(*args, module=module))
                table += _summarize(framework, results)
        finally:
            server.stop()
    return table


def _summarize(framework: str, results: dict[str, list[dict[str, Any]]]) -> list[list[str]]:
    staging, s3 = results["staging"], results["s3"]
    ratio = median(b["checkpoint_s"] / a["checkpoint_s"] for a, b in zip(staging, s3, strict=True))
    bench(f"{framework}_checkpoint_s3_vs_staging_x", ratio, "x")
    rows = []
    for mode, runs in results.items():
        path = median(r["checkpoint_s"] for r in runs)
        upload = median(r["upload_s"] for r in runs)
        fit = median(r["fit_s"] for r in runs)
        bench(f"{framework}_{mode}_checkpoint_s_per_epoch", path, "s")
        rows.append([f"{framework} {mode}", f"{path * 1000:.1f}", f"{upload * 1000:.1f}",
                     f"{fit:.2f}", f"{ratio:.2f}" if mode == "s3" else ""])  # fmt: skip
    return rows


def print_table(rows: list[list[str]], epochs: int, runs: int) -> None:
    print(f"\ncheckpoint cost per epoch, residual CNN, {LIMIT} images, {epochs} epochs, "
          f"median of {runs} runs")  # fmt: skip
    print(f"{'case':<22}{'on path ms':>12}{'upload ms':>12}{'epoch s':>10}{'s3/staging':>12}")
    for name, path, upload, fit, ratio in rows:
        print(f"{name:<22}{path:>12}{upload:>12}{fit:>10}{ratio:>12}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["case"]:
        framework, mode, epochs, endpoint = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
        print("RESULT " + json.dumps(case(framework, mode, epochs, endpoint)), flush=True)
    else:
        epochs, runs = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (3, 1)
        print_table(run(epochs, runs), epochs, runs)
