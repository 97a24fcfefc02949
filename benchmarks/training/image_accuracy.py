"""The residual CNN's test accuracy from Fashion-MNIST written out as PNG files, augmented.

`python -m benchmarks --only image_accuracy [--epochs N] [--images N]` (or `python -m
benchmarks.training.image_accuracy [--tiny] [--epochs N] [--images N]`):
- Fashion-MNIST's training and test images written as two image folders of PNG files
  (benchmarks.training.image_folder: 60,000 and 10,000, or the first N of each);
- both folders ingested by the service's own code (image_folder format) into a directory
  store, as the `train` and `test` parts of one data set;
- per framework in a fresh process, the residual CNN of examples/residual-fashion-mnist.yaml
  (its optimizer, cosine schedule and batch) on the whole training part, no validation split,
  with the augmentation below, through the worker's own attempt code (run_attempt: the
  streaming reader, checkpoints, the export with its ONNX parity check);
- the test accuracy of the framework's model on the test part's records after every epoch
  (the schedule is the whole run's, so only the last epoch's is a finished run's), the
  epoch's wall time, samples/s and input wait.
Goal: at least GOAL test accuracy in both frameworks. Prints a table, `BENCH` lines, and per
epoch an `EPOCH {json}` line on stderr as it comes.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.training.architectures import FRAMEWORKS, RESNET, example
from benchmarks.training.common import DATA_DIR, bench_parser, print_aligned
from benchmarks.training.image_folder import write_fashion_mnist
from benchmarks.training.image_loader import ingest_folder
from benchmarks.training.suite import bench, run_case
from worker.training.callbacks import Callback, TrainState

if TYPE_CHECKING:
    from worker.training.backend import Backend
    from worker.training.callbacks import Logs

DATASET = "fashion-mnist-png"
# A padding of 2 (of the 2 or 4 that suit 28x28 images): the milder crop for a short run.
# normalize: the image example's constants, for the one grey channel.
AUGMENT = [
    {"op": "random_crop", "size": 28, "padding": 2},
    {"op": "flip_horizontal"},
    {"op": "normalize", "mean": [0.5], "std": [0.25]},
]
GOAL = 0.935


class Sizes(NamedTuple):
    images: int | None  # the first N training and test images each; None: all of them
    epochs: int


FULL = Sizes(None, 30)
QUICK = Sizes(2_000, 1)
TINY = Sizes(200, 1)


def spec_body(framework: str, epochs: int) -> dict[str, Any]:
    """The example's job on the PNG data set, augmented, every training image trained on."""
    body = example(RESNET, framework, epochs=epochs)
    body["dataset"] = {"id": DATASET, "validation_split": 0.0, "augment": AUGMENT}
    return body


def prepare(root: Path, images: int | None) -> dict[str, float]:
    """root/png/{train,test} written as PNG files and ingested into root/store; the images
    of each and the seconds each step took."""
    began = time.perf_counter()
    written = write_fashion_mnist(root / "png", images)
    wrote = time.perf_counter() - began
    ingest = sum(
        ingest_folder(root / "store", DATASET, part, root / "png" / part)
        for part in ("train", "test")
    )
    return {
        "train_images": written["train"],
        "test_images": written["test"],
        "write_seconds": wrote,
        "ingest_seconds": ingest,
    }


class TestEachEpoch(Callback):
    """The test accuracy after each epoch, beside the epoch's own figures."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.rows: list[dict[str, float]] = []

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        began = time.perf_counter()
        accuracy = float(self.backend.evaluate("test")["accuracy"])
        row = {"epoch": state.epoch, "test_accuracy": accuracy}
        for name in ("epoch_seconds", "samples_per_second", "data_wait_seconds"):
            row[name] = float(logs[name])
        row["test_seconds"] = time.perf_counter() - began
        self.rows.append(row)
        print("EPOCH " + json.dumps(row), file=sys.stderr, flush=True)


def case(framework: str, epochs: int, root: Path) -> dict[str, Any]:
    """One framework's job on the data set in root/store, trained to success."""
    from app.schemas.job_spec import JobSpec
    from app.storage.directory import DirectoryStore
    from worker.child.train_attempt import run_attempt
    from worker.training.backend import Placement, create_backend
    from worker.training.data import load_splits

    spec = JobSpec.model_validate(spec_body(framework, epochs))
    splits = load_splits(spec, DATA_DIR, DirectoryStore(root / "store"))
    backend = create_backend(spec, splits, Placement())
    tested = TestEachEpoch(backend)
    state = TrainState(epochs=epochs, learning_rate=spec.optimizer.learning_rate)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        try:
            outcome = run_attempt(spec, Path(workdir), backend, splits, state, [tested])
        finally:
            backend.close()
    if outcome.status != "succeeded":
        raise RuntimeError(f"the {framework} job did not succeed: {outcome}")
    return {
        "test_accuracy": float(outcome.result["test_accuracy"]),
        "epochs": tested.rows,
        "attempt_seconds": time.perf_counter() - began,
    }


def run(sizes: Sizes) -> dict[str, Any]:
    """The folders written and ingested once, then each framework's case in turn."""
    with tempfile.TemporaryDirectory() as tmp:
        prepared = prepare(Path(tmp), sizes.images)
        cases = {
            framework: run_case(
                "case", framework, sizes.epochs, tmp, module="benchmarks.training.image_accuracy"
            )
            for framework in FRAMEWORKS
        }
    return {"prepared": prepared, "cases": cases, "epochs": sizes.epochs}


def report(results: dict[str, Any]) -> list[list[str]]:
    """BENCH lines and the table's rows: per framework and epoch, then the final score."""
    prepared, rows = results["prepared"], []
    bench("image_accuracy_ingest_images_per_s", _ingest_rate(prepared), "images/s")
    for framework, result in results["cases"].items():
        for row in result["epochs"]:
            rows.append(
                [f"{framework} epoch {row['epoch']}", f"{row['test_accuracy']:.4f}",
                 f"{row['samples_per_second']:,.0f}", f"{row['epoch_seconds']:,.0f}",
                 f"{row['data_wait_seconds'] / row['epoch_seconds']:.1%}", ""]
            )  # fmt: skip
        final = result["test_accuracy"]
        steady = result["epochs"][1:] or result["epochs"]  # the first pays tracing, warm-up
        speed = sum(r["samples_per_second"] for r in steady) / len(steady)
        seconds = sum(r["epoch_seconds"] for r in steady) / len(steady)
        bench(f"image_accuracy_{framework}_test_accuracy", final, "fraction")
        bench(f"image_accuracy_{framework}_samples_per_s", speed, "samples/s")
        bench(f"image_accuracy_{framework}_epoch_s", seconds, "s")
        verdict = "pass" if final >= GOAL else "below"
        rows.append(
            [f"{framework} final", f"{final:.4f}", f"{speed:,.0f}", f"{seconds:,.0f}", "",
             f">= {GOAL} {verdict}"]
        )  # fmt: skip
    return rows


def _ingest_rate(prepared: dict[str, float]) -> float:
    return (prepared["train_images"] + prepared["test_images"]) / prepared["ingest_seconds"]


def print_table(rows: list[list[str]], results: dict[str, Any]) -> None:
    p = results["prepared"]
    title = (
        f"image accuracy: Fashion-MNIST as PNG files, {p['train_images']:,.0f} train and "
        f"{p['test_images']:,.0f} test, epochs: {results['epochs']}, augmented; written in "
        f"{p['write_seconds']:.0f} s, ingested at {_ingest_rate(p):,.0f} images/s"
    )
    header = ["run", "test accuracy", "samples/s", "epoch s", "input wait", "goal"]
    print_aligned(title, header, rows, right=())


def sizes(base: Sizes, epochs: int | None, images: int | None) -> Sizes:
    """`base` with the epochs and images given instead of its own."""
    return Sizes(images or base.images, epochs or base.epochs)


def main(argv: list[str]) -> None:
    if argv[:1] == ["case"]:  # one framework, in a fresh process: case FRAMEWORK EPOCHS ROOT
        result = case(argv[1], int(argv[2]), Path(argv[3]))
        print("RESULT " + json.dumps(result), flush=True)
        return
    if argv[:1] == ["prepare"]:  # prepare ROOT [IMAGES]: the folders and store kept in ROOT
        print(json.dumps(prepare(Path(argv[1]), int(argv[2]) if argv[2:] else None)))
        return
    prog = "python -m benchmarks.training.image_accuracy"
    parser = bench_parser(prog, tiny="200 images, 1 epoch: a smoke run")
    parser.add_argument("--epochs", type=int, default=None, help=f"default {FULL.epochs}")
    parser.add_argument("--images", type=int, default=None, help="the first N of each split")
    args = parser.parse_args(argv)
    results = run(sizes(TINY if args.tiny else FULL, args.epochs, args.images))
    print_table(report(results), results)


if __name__ == "__main__":
    main(sys.argv[1:])
