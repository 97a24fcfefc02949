"""Warm start against training from scratch, both frameworks: does a trained backbone help?

`python -m benchmarks --only warm_start` (or `python -m benchmarks.training.warm_start
[--tiny | SAMPLES EPOCHS SOURCE_EPOCHS SEED]`), per framework in a fresh process:
- Fashion-MNIST's classes 0-4 and 5-9 (labels 0-4 both) stored as two uploads, the way the
  API stores one, in a data directory of the run's own; SAMPLES images of each,
  VALIDATION_SPLIT of them held out;
- the residual CNN of examples/residual-fashion-mnist.yaml trained on classes 0-4 (the source
  job, SOURCE_EPOCHS epochs); its weights kept where a succeeded job's are;
- the same graph on classes 5-9, its backbone taken from the source by `init` (the head fresh:
  the classes differ), stem and stage 1 `trainable: false`, EPOCHS epochs;
- the same graph from scratch on classes 5-9, everything trainable, the same seed and epochs.
Each job runs through the worker's own attempt code (run_attempt: loop, checkpoints, export),
so the warm job loads the source's weights as a worker does. The example's cosine schedule
with its warm-up epoch spans its 12 epochs; here the rate is constant.

Prints the validation accuracy after every epoch (warm and scratch), whether the warm job's
first epoch reaches the scratch job's second, whether the frozen variables are bit-identical
in the source's and the warm job's saved weights; `BENCH` lines, and a `RESULT` json line.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.training.architectures import FRAMEWORKS, RESNET, example
from benchmarks.training.common import fashion_arrays
from benchmarks.training.suite import bench, run_case

VALIDATION_SPLIT = 0.2
BATCH = 64  # the example's 128 gives too few steps an epoch on a subset to settle batch norm
FROZEN_UP_TO = "pool1"  # the stem and stage 1: every layer up to the end of stage 1
# images per half (a tenth of each), fine-tune epochs, source epochs, every job's seed
FULL = (3000, 3, 3, 7)
QUICK = (1000, 2, 1, 7)
TINY = (300, 1, 1, 7)


def write_halves(data_dir: Path, samples: int) -> tuple[str, str]:
    """Classes 0-4 and 5-9 (each relabelled 0-4), the first `samples` images of each, stored
    as uploads the way the API stores them; their data set ids."""
    from app.domain import uploads
    from app.schemas.ids import new_id

    (x, y), _ = fashion_arrays()
    ids = []
    for low in (0, 5):
        keep = np.flatnonzero((y >= low) & (y < low + 5))[:samples]
        images = x[keep, ..., None]  # (28, 28, 1): channels last, as a conv2d reads them
        arrays, _ = uploads.validate(uploads.Arrays(images, y[keep] - low), "classification")
        dataset_id = new_id()
        uploads.store(arrays, data_dir, dataset_id)
        ids.append(dataset_id)
    return ids[0], ids[1]


def spec_body(
    framework: str, dataset_id: str, epochs: int, seed: int, frozen: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The residual example on an upload; the `frozen` layers not trainable."""
    body = example(RESNET, framework, epochs=epochs, seed=seed, batch_size=BATCH)
    body["dataset"] = {"id": dataset_id, "validation_split": VALIDATION_SPLIT}
    body.pop("lr_scheduler", None)
    layers = body["model"]["layers"]
    body["model"]["layers"] = [
        {**layer, "trainable": False} if layer["name"] in frozen else layer for layer in layers
    ]
    return body


def stem_and_stage1(body: dict[str, Any]) -> frozenset[str]:
    """The layers of the stem and stage 1 (only those with variables can be frozen)."""
    names = [layer["name"] for layer in body["model"]["layers"]]
    return frozenset(names[: names.index(FROZEN_UP_TO) + 1])


def train(body: dict[str, Any], data_dir: Path, workdir: Path) -> list[float]:
    """The job in `workdir` (its directory among the jobs'), trained to success; the
    validation accuracy after each epoch."""
    from app.schemas.job_spec import JobSpec
    from worker.child.train_attempt import run_attempt
    from worker.training.backend import Placement, create_backend
    from worker.training.callbacks import EpochLog, TrainState
    from worker.training.data import load_splits

    spec = JobSpec.model_validate(body)
    splits = load_splits(spec, data_dir)
    backend = create_backend(spec, splits, Placement())
    log = EpochLog()
    state = TrainState(epochs=spec.training.epochs, learning_rate=spec.optimizer.learning_rate)
    try:
        outcome = run_attempt(spec, workdir, backend, splits, state, [log])
    finally:
        backend.close()
    if outcome.status != "succeeded":
        raise RuntimeError(f"{workdir.name} did not succeed: {outcome}")
    return [float(row["val_accuracy"]) for row in log.rows]


def backbone(body: dict[str, Any], data_dir: Path) -> list[str]:
    """The nodes with variables but the head: what submit resolves the init list to when the
    classes differ."""
    from app.schemas.graph.model import HEAD
    from app.schemas.job_spec import JobSpec
    from worker.training.data import load_splits
    from worker.training.warm_start import graph_for

    spec = JobSpec.model_validate(body)
    graph = graph_for(spec, load_splits(spec, data_dir))
    return [node.name for node in graph.nodes if node.variables() and node.name != HEAD]


def frozen_identical(source: Path, warm: Path, frozen: frozenset[str]) -> tuple[bool, int]:
    """Whether every variable of the frozen nodes is bit for bit the same in both jobs' saved
    weights, and how many variables were compared."""
    from app.domain.job_files import WEIGHTS_FILE, JobFiles

    paths = [JobFiles(job).model_dir / WEIGHTS_FILE for job in (source, warm)]
    with np.load(paths[0]) as before, np.load(paths[1]) as after:
        names = [key for key in before.files if key.split("/")[0] in frozen]
        same = all(np.array_equal(before[key], after[key]) for key in names)
    return same and bool(names), len(names)


def case(
    framework: str, samples: int, epochs: int, source_epochs: int, seed: int
) -> dict[str, Any]:
    """Source, warm and scratch jobs of one framework; their curves and the two checks."""
    with tempfile.TemporaryDirectory() as root:
        data_dir, jobs = Path(root) / "data", Path(root) / "jobs"
        first, second = write_halves(data_dir, samples)
        scratch = spec_body(framework, second, epochs, seed)
        taken = backbone(scratch, data_dir)
        frozen = stem_and_stage1(scratch) & frozenset(taken)
        source = spec_body(framework, first, source_epochs, seed)
        source_curve = train(source, data_dir, jobs / "source")
        warm = spec_body(framework, second, epochs, seed, frozen)
        warm["init"] = {"from_job": "source", "nodes": taken}
        warm_curve = train(warm, data_dir, jobs / "warm")
        scratch_curve = train(scratch, data_dir, jobs / "scratch")
        identical, compared = frozen_identical(jobs / "source", jobs / "warm", frozen)
    return {
        "samples": samples,
        "seed": seed,
        "source": source_curve,
        "warm": warm_curve,
        "scratch": scratch_curve,
        "warm_epoch1_reaches_scratch_epoch2": (
            warm_curve[0] >= scratch_curve[1] if len(scratch_curve) > 1 else None
        ),
        "frozen_identical": identical,
        "frozen_variables": compared,
    }


def run(samples: int, epochs: int, source_epochs: int, seed: int) -> dict[str, dict[str, Any]]:
    """Every framework's case in a fresh process; BENCH lines as results arrive."""
    results = {}
    for framework in FRAMEWORKS:
        args = ("case", framework, samples, epochs, source_epochs, seed)
        result = run_case(*args, module="benchmarks.training.warm_start")
        for kind in ("warm", "scratch"):
            for epoch, value in enumerate(result[kind], start=1):
                bench(f"warm_start_{framework}_{kind}_val_accuracy_epoch{epoch}", value, "fraction")
        results[framework] = result
    return results


def print_table(results: dict[str, dict[str, Any]]) -> None:
    any_result = next(iter(results.values()))
    print(
        f"\nWarm start on Fashion-MNIST classes 5-9 from a backbone trained on 0-4 "
        f"({any_result['samples']} images per half, {VALIDATION_SPLIT:.0%} held out, "
        f"seed {any_result['seed']})"
    )
    print(f"{'framework':<12}{'epoch':>6}{'warm acc':>10}{'scratch acc':>13}")
    for framework, result in results.items():
        pairs = zip(result["warm"], result["scratch"], strict=True)
        for epoch, (warm, scratch) in enumerate(pairs, start=1):
            print(f"{framework:<12}{epoch:>6}{warm:>10.4f}{scratch:>13.4f}")
    for framework, result in results.items():
        print(
            f"{framework}: warm epoch 1 >= scratch epoch 2: "
            f"{result['warm_epoch1_reaches_scratch_epoch2']}; frozen variables bit-identical: "
            f"{result['frozen_identical']} ({result['frozen_variables']} compared)"
        )
    print("RESULT " + json.dumps({"warm_start": results}), flush=True)


def main(argv: list[str]) -> None:
    if argv[:1] == ["case"]:
        framework, numbers = argv[1], [int(a) for a in argv[2:6]]
        print("RESULT " + json.dumps(case(framework, *numbers)), flush=True)
        return
    sizes = TINY if argv == ["--tiny"] else tuple(int(a) for a in argv) if argv else FULL
    print_table(run(*sizes))


if __name__ == "__main__":
    main(sys.argv[1:])
