"""Streamed against in-memory: the same Fashion-MNIST job from the built-in arrays and from
shards in a directory store, both frameworks, in fresh processes, interleaved.

`python -m benchmarks.training.streamed [EPOCHS RUNS]` prints a table and `BENCH` lines:
training samples/s of each path (epochs after the first), the streamed one's ratio to the
in-memory one, and its input wait as a share of its epoch time (after the first epoch).
`python -m benchmarks.training.streamed case FRAMEWORK MODE EPOCHS STORE` is one run.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.training.common import DATA_DIR, fashion_arrays, seed_equivalent_spec
from benchmarks.training.suite import bench, run_case

DATASET = "fashion-bench"
SHARD_BYTES = 8 * 1024 * 1024  # about 10 600 images a shard: 6 shards, so windows rotate


def write_store(root: Path) -> None:
    """Fashion-MNIST's train and test splits as shards under the data set's prefixes."""
    from app.shards import Schema, ShardWriter, dataset_prefix
    from app.storage.directory import DirectoryStore

    store = DirectoryStore(root)
    for part, (x, y) in zip(("train", "test"), fashion_arrays(), strict=True):
        schema = Schema.of(x.shape[1:], x.dtype, "class")
        prefix = dataset_prefix(DATASET, part)
        with ShardWriter(store, prefix, schema, shard_bytes=SHARD_BYTES, classes=10) as writer:
            writer.add_batch(x, y)


def case(framework: str, mode: str, epochs: int, store_root: str) -> dict[str, Any]:
    from app.schemas.job_spec import JobSpec
    from app.storage.directory import DirectoryStore
    from worker.child.train_attempt import run_attempt
    from worker.training.backend import Placement, create_backend
    from worker.training.callbacks import EpochLog, TrainState
    from worker.training.data import load_splits

    body = seed_equivalent_spec(framework, epochs)
    if mode == "streamed":
        body["dataset"] = {"id": DATASET, "validation_split": 0.0}
    spec = JobSpec.model_validate(body)
    splits = load_splits(spec, DATA_DIR, DirectoryStore(Path(store_root)))
    backend = create_backend(spec, splits, Placement())
    log = EpochLog()
    with tempfile.TemporaryDirectory() as workdir:
        state = TrainState(epochs=spec.training.epochs, learning_rate=spec.optimizer.learning_rate)
        outcome = run_attempt(spec, Path(workdir), backend, splits, state, [log])
    backend.close()
    steady = log.rows[1:] or log.rows
    waits = [r.get("data_wait_seconds", 0.0) / r["epoch_seconds"] for r in steady]
    return {
        "samples_per_second": median(r["samples_per_second"] for r in steady),
        "wait_share": median(waits),
        "accuracy": float(outcome.result["test_accuracy"]),
    }


def run(epochs: int, runs: int) -> list[list[str]]:
    table: list[list[str]] = []
    with tempfile.TemporaryDirectory() as root:
        write_store(Path(root))
        for framework in ("pytorch", "tensorflow"):
            results: dict[str, list[dict[str, Any]]] = {"memory": [], "streamed": []}
            for _ in range(runs):
                for mode in results:
                    module = "benchmarks.training.streamed"
                    args = ("case", framework, mode, epochs, root)
                    results[mode].append(run_case(*args, module=module))
            memory, streamed = results["memory"], results["streamed"]
            ratio = median(
                s["samples_per_second"] / m["samples_per_second"]
                for s, m in zip(streamed, memory, strict=True)
            )
            for mode, rows in results.items():
                speed = median(r["samples_per_second"] for r in rows)
                bench(f"{framework}_{mode}_samples_per_s", speed, "samples/s")
                wait = median(r["wait_share"] for r in rows)
                accuracy = median(r["accuracy"] for r in rows)
                table.append(
                    [f"{framework} {mode}", f"{speed:,.0f}", f"{wait:.3f}", f"{accuracy:.4f}"]
                )
            bench(f"{framework}_streamed_vs_memory_x", ratio, "x")
            bench(
                f"{framework}_streamed_wait_share",
                median(r["wait_share"] for r in streamed),
                "fraction",
            )
    return table


def print_table(rows: list[list[str]], epochs: int, runs: int) -> None:
    print(f"\nstreamed vs in-memory, Fashion-MNIST, {epochs} epochs, median of {runs} runs")
    print(f"{'case':<22}{'samples/s':>12}{'input wait':>12}{'test acc':>10}")
    for name, speed, wait, accuracy in rows:
        print(f"{name:<22}{speed:>12}{wait:>12}{accuracy:>10}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["case"]:
        framework, mode, epochs, store = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
        print("RESULT " + json.dumps(case(framework, mode, epochs, store)), flush=True)
    else:
        epochs, runs = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (3, 1)
        print_table(run(epochs, runs), epochs, runs)
