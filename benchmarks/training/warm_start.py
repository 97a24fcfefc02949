"""Warm start against training from scratch, both frameworks: does a trained backbone help?

`python -m benchmarks --only warm_start` (or `python -m benchmarks.training.warm_start
[--tiny | SOURCE_SAMPLES SOURCE_EPOCHS SAMPLES EPOCHS SEED...]`), per framework in a fresh
process:
- Fashion-MNIST's classes 0-4 and 5-9 (labels 0-4 both) stored as two uploads, the way the
  API stores one, in a data directory of the run's own: SOURCE_SAMPLES images of classes 0-4
  (SOURCE_VALIDATION of them held out) and SAMPLES of classes 5-9 (VALIDATION_SPLIT held out:
  a large validation half, so that a point of accuracy is above its noise);
- the residual CNN of examples/residual-fashion-mnist.yaml trained on classes 0-4 (the source
  job, SOURCE_EPOCHS epochs, the first seed); its weights kept where a succeeded job's are.
  The backbone sees more images than the fine-tune trains on (by default 7,200 against
  1,500), the case a warm start is for;
- for each SEED, the same graph on classes 5-9, its backbone taken from the source by `init`
  (the head fresh: the classes differ), stem and stage 1 `trainable: false`, EPOCHS epochs;
  and the same graph from scratch on classes 5-9, everything trainable, that seed and epochs.
The seeds draw the fine-tune's and the scratch job's initial weights, validation half and
order: the claim is judged on every one of them, not on one lucky draw.
Each job runs through the worker's own attempt code (run_attempt: loop, checkpoints, export),
so the warm job loads the source's weights as a worker does. The example's cosine schedule
with its warm-up epoch spans its 12 epochs; here the rate is constant.

Prints the validation accuracy after every epoch (warm and scratch: mean, lowest and highest
over the seeds), whether the warm job's first epoch reaches the scratch job's second on every
seed, whether the frozen variables are bit-identical in the source's and every warm job's saved
weights; `BENCH` lines, and a `RESULT` json line.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.training.architectures import FRAMEWORKS, RESNET, example
from benchmarks.training.common import fashion_arrays
from benchmarks.training.suite import bench, run_case

SOURCE_VALIDATION = 0.1  # the source's curve is shown, not judged: most of it trains
VALIDATION_SPLIT = 0.5  # 1,500 of 3,000 images: about ±0.8 points at 0.9
BATCH = 64  # the example's 128 gives too few steps an epoch on a subset to settle batch norm
FROZEN_UP_TO = "pool1"  # the stem and stage 1: every layer up to the end of stage 1


class Sizes(NamedTuple):
    """Images of classes 0-4 and the source's epochs; images of classes 5-9, the fine-tune's
    (and the scratch job's) epochs, and their seeds (the first also the source's)."""

    source_samples: int
    source_epochs: int
    samples: int
    epochs: int
    seeds: tuple[int, ...]


# By default 7,200 images of 0-4 train the backbone, 1,500 of 5-9 the fine-tune, 1,500 judge it.
FULL = Sizes(8000, 2, 3000, 2, (7, 8, 9))
QUICK = Sizes(3000, 2, 1500, 2, (7,))
TINY = Sizes(300, 1, 300, 1, (7, 8))


def write_halves(data_dir: Path, source_samples: int, samples: int) -> tuple[str, str]:
    """Classes 0-4 and 5-9 (each relabelled 0-4), the first `source_samples` and `samples`
    images of each, stored as uploads the way the API stores them; their data set ids."""
    from app.domain import uploads
    from app.schemas.ids import new_id

    (x, y), _ = fashion_arrays()
    ids = []
    for low, count in ((0, source_samples), (5, samples)):
        keep = np.flatnonzero((y >= low) & (y < low + 5))[:count]
        images = x[keep, ..., None]  # (28, 28, 1): channels last, as a conv2d reads them
        arrays, _ = uploads.validate(uploads.Arrays(images, y[keep] - low), "classification")
        dataset_id = new_id()
        uploads.store(arrays, data_dir, dataset_id)
        ids.append(dataset_id)
    return ids[0], ids[1]


def spec_body(
    framework: str,
    dataset_id: str,
    epochs: int,
    seed: int,
    frozen: frozenset[str] = frozenset(),
    validation: float = VALIDATION_SPLIT,
) -> dict[str, Any]:
    """The residual example on an upload; the `frozen` layers not trainable."""
    body = example(RESNET, framework, epochs=epochs, seed=seed, batch_size=BATCH)
    body["dataset"] = {"id": dataset_id, "validation_split": validation}
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


def fine_tune(
    framework: str, dataset_id: str, epochs: int, seed: int, data_dir: Path, jobs: Path
) -> dict[str, Any]:
    """One seed's warm job (from jobs/source) and scratch job; their curves and whether the
    frozen variables came through bit for bit."""
    scratch = spec_body(framework, dataset_id, epochs, seed)
    taken = backbone(scratch, data_dir)
    frozen = stem_and_stage1(scratch) & frozenset(taken)
    warm = spec_body(framework, dataset_id, epochs, seed, frozen)
    warm["init"] = {"from_job": "source", "nodes": taken}
    warm_curve = train(warm, data_dir, jobs / f"warm-{seed}")
    scratch_curve = train(scratch, data_dir, jobs / f"scratch-{seed}")
    identical, compared = frozen_identical(jobs / "source", jobs / f"warm-{seed}", frozen)
    return {
        "seed": seed,
        "warm": warm_curve,
        "scratch": scratch_curve,
        "frozen_identical": identical,
        "frozen_variables": compared,
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each curve's mean, lowest and highest over the seeds, per epoch; warm epoch 1 against
    scratch epoch 2 per seed (None with one epoch); the frozen check over every warm job."""
    out: dict[str, Any] = {}
    for kind in ("warm", "scratch"):
        curves = np.array([run[kind] for run in runs])
        out[kind] = {
            "mean": curves.mean(axis=0).tolist(),
            "low": curves.min(axis=0).tolist(),
            "high": curves.max(axis=0).tolist(),
        }
    margins = [run["warm"][0] - run["scratch"][1] for run in runs if len(run["scratch"]) > 1]
    return out | {
        "margins": margins,  # warm epoch 1 minus scratch epoch 2, per seed
        "warm_epoch1_reaches_scratch_epoch2": all(m >= 0 for m in margins) if margins else None,
        "frozen_identical": all(run["frozen_identical"] for run in runs),
        "frozen_variables": min(run["frozen_variables"] for run in runs),
    }


def case(framework: str, sizes: Sizes) -> dict[str, Any]:
    """The source job of one framework, then a warm and a scratch job for each seed."""
    with tempfile.TemporaryDirectory() as root:
        data_dir, jobs = Path(root) / "data", Path(root) / "jobs"
        first, second = write_halves(data_dir, sizes.source_samples, sizes.samples)
        source = spec_body(
            framework, first, sizes.source_epochs, sizes.seeds[0], validation=SOURCE_VALIDATION
        )
        source_curve = train(source, data_dir, jobs / "source")
        runs = [
            fine_tune(framework, second, sizes.epochs, seed, data_dir, jobs) for seed in sizes.seeds
        ]
    return {"sizes": sizes._asdict(), "source": source_curve, "runs": runs} | summary(runs)


def run(sizes: Sizes) -> dict[str, dict[str, Any]]:
    """Every framework's case in a fresh process; BENCH lines as results arrive."""
    results = {}
    for framework in FRAMEWORKS:
        numbers = (sizes.source_samples, sizes.source_epochs, sizes.samples, sizes.epochs)
        args: list[str | int] = ["case", framework, *numbers, *sizes.seeds]
        result = run_case(*args, module="benchmarks.training.warm_start")
        for kind in ("warm", "scratch"):
            for epoch, value in enumerate(result[kind]["mean"], start=1):
                bench(f"warm_start_{framework}_{kind}_val_accuracy_epoch{epoch}", value, "fraction")
        if result["margins"]:
            bench(
                f"warm_start_{framework}_epoch1_margin_lowest", min(result["margins"]), "fraction"
            )
        results[framework] = result
    return results


def _spread(stats: dict[str, list[float]], epoch: int) -> str:
    return f"{stats['mean'][epoch]:.3f} ({stats['low'][epoch]:.3f}-{stats['high'][epoch]:.3f})"


def print_table(results: dict[str, dict[str, Any]]) -> None:
    sizes = Sizes(**next(iter(results.values()))["sizes"])
    print(
        f"\nWarm start on Fashion-MNIST classes 5-9 ({sizes.samples:,} images, "
        f"{VALIDATION_SPLIT:.0%} held out) from a backbone trained {sizes.source_epochs} epochs "
        f"on {sizes.source_samples:,} of 0-4; seeds {', '.join(map(str, sizes.seeds))}: "
        "validation accuracy, mean (lowest-highest)"
    )
    print(f"{'framework':<12}{'epoch':>6}{'warm':>24}{'scratch':>24}")
    for framework, result in results.items():
        for epoch in range(sizes.epochs):
            warm, scratch = _spread(result["warm"], epoch), _spread(result["scratch"], epoch)
            print(f"{framework:<12}{epoch + 1:>6}{warm:>24}{scratch:>24}")
    for framework, result in results.items():
        margins = result["margins"]
        held = sum(m >= 0 for m in margins)
        points = ", ".join(f"{100 * m:+.1f}" for m in margins)
        source = " ".join(f"{a:.3f}" for a in result["source"])
        print(
            f"{framework}: source on 0-4, epochs 1-{sizes.source_epochs}: {source}; "
            f"warm epoch 1 >= scratch epoch 2: {result['warm_epoch1_reaches_scratch_epoch2']} "
            f"({held} of {len(margins)} seeds; points {points}); frozen variables "
            f"bit-identical: {result['frozen_identical']} ({result['frozen_variables']} compared)"
        )
    print("RESULT " + json.dumps({"warm_start": results}), flush=True)


def sizes_of(numbers: list[str]) -> Sizes:
    """SOURCE_SAMPLES SOURCE_EPOCHS SAMPLES EPOCHS SEED... as Sizes."""
    n = [int(a) for a in numbers]
    if len(n) < 5:
        raise SystemExit("SOURCE_SAMPLES SOURCE_EPOCHS SAMPLES EPOCHS SEED... (one seed at least)")
    return Sizes(n[0], n[1], n[2], n[3], tuple(n[4:]))


def main(argv: list[str]) -> None:
    if argv[:1] == ["case"]:
        print("RESULT " + json.dumps(case(argv[1], sizes_of(argv[2:]))), flush=True)
        return
    sizes = TINY if argv == ["--tiny"] else sizes_of(argv) if argv else FULL
    print_table(run(sizes))


if __name__ == "__main__":
    main(sys.argv[1:])
