"""A PyTorch job through the worker's training code against the hand-written loop, same data.

`python -m benchmarks --only hand_written [--quick]`, or
`python -m benchmarks.training.job_loop [--tiny|--quick] [--threads N] [--cpu-time]`:
the residual CNN of examples/residual-fashion-mnist.yaml on the first LIMIT Fashion-MNIST
training images (no validation split), batch 128, AdamW, in fp32 and under bf16 autocast.
The job side is the worker's own attempt in-process (worker.child.train_attempt.run_attempt: the
back-end, the loop, its callbacks, a checkpoint each epoch, the final evaluation and export),
without a database; the hand side is the plain nn.Module of benchmarks.training.hand_networks
in the loop a PyTorch user writes (a fresh permutation each epoch, `x[idx]`, forward, loss,
backward, step), on the same normalized arrays the job loads. Both are measured alike: an
epoch's training samples over the clock's time around its steps (for the job, around the
back-end's train_epoch, where the loop's own `samples_per_second` reads it: validation and
callbacks are outside), best over the epochs after the first of ROUNDS alternated turns;
process start, the framework's import and the data's loading are outside the clock.
`--cpu-time` reads the process's CPU time instead of the wall clock (with `--threads 1`, the
epoch's own work, which other processes on a shared machine move far less).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.training.common import DATA_DIR, bench_parser, print_aligned
from benchmarks.training.hand_networks import hand_network
from benchmarks.training.hand_written import BATCH, PRECISIONS, THREADS, precision, spec_of
from benchmarks.training.suite import bench

ROUNDS = 3
Clock = Callable[[], float]
HEADER = ["network", "precision", "hand loop samples/s", "job samples/s", "job / hand"]


@dataclass(frozen=True)
class Size:
    """Images per epoch and epochs per turn (the first epoch of a turn is its warm-up)."""

    limit: int
    epochs: int
    rounds: int


FULL, QUICK, TINY = Size(6016, 4, ROUNDS), Size(3072, 3, 2), Size(512, 2, 1)


def job_spec(prec: str, size: Size) -> dict[str, Any]:
    """The residual example as a job: no validation split, `size`'s images and epochs."""
    spec = spec_of("resnet")
    spec["dataset"] = {**spec["dataset"], "validation_split": 0.0, "limit": size.limit}
    spec["training"] = {**spec["training"], "epochs": size.epochs}
    spec["resources"] = {**spec.get("resources", {}), "precision": prec}
    return spec


def job_turn(body: dict[str, Any], splits: Any, clock: Clock, threads: int | None = None) -> float:
    """Best steady-epoch samples/s of one job (either framework) run through the worker's
    attempt. The clock is read around the back-end's train_epoch, where the loop reads its
    own; `threads`: the intra-op pool (default torch's)."""
    from app.schemas.job_spec import JobSpec
    from worker.child.train_attempt import run_attempt
    from worker.training.backend import Placement, TrainedEpoch, create_backend
    from worker.training.callbacks import TrainState

    spec = JobSpec.model_validate(body)
    placement = Placement(threads=threads or torch.get_num_threads())
    backend = create_backend(spec, splits, placement)
    train_epoch, speeds = backend.train_epoch, []

    def timed(state: TrainState) -> TrainedEpoch | None:
        began = clock()
        trained = train_epoch(state)
        if trained is not None:
            speeds.append(trained.samples / (clock() - began))
        return trained

    backend.train_epoch = timed  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as workdir:
        state = TrainState(epochs=spec.training.epochs, learning_rate=spec.optimizer.learning_rate)
        outcome = run_attempt(spec, Path(workdir), backend, splits, state)
    backend.close()
    if outcome.result is None or len(speeds) != spec.training.epochs:
        raise RuntimeError(f"the benchmark job did not train its epochs: {outcome}")
    return max(speeds[1:])


def hand_turn(body: dict[str, Any], splits: Any, prec: str, clock: Clock) -> float:
    """Best steady-epoch samples/s of the hand-written network in a user's plain loop."""
    from app.schemas.job_spec import JobSpec
    from worker.training.torch.graph import KIT

    spec = JobSpec.model_validate(body)
    torch.manual_seed(spec.training.seed)
    model = hand_network("resnet")
    optimizer = spec.optimizer.torch_optimizer(KIT, list(model.parameters()))
    x, y = torch.from_numpy(splits.x_train), torch.from_numpy(splits.y_train)
    model.train()
    speeds = []
    for _epoch in range(spec.training.epochs):
        began = clock()
        for idx in torch.randperm(len(x)).split(BATCH):
            with precision(prec):
                loss = F.cross_entropy(model(x[idx]).float(), y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        speeds.append(len(x) / (clock() - began))
    return max(speeds[1:])


def measure(prec: str, size: Size, clock: Clock) -> list[str]:
    """One precision's row: each side's best over `size.rounds` alternated turns."""
    from app.schemas.job_spec import JobSpec
    from worker.training.data import load_splits

    body = job_spec(prec, size)
    splits = load_splits(JobSpec.model_validate(body), DATA_DIR)
    best = {"hand": 0.0, "job": 0.0}
    for turn in range(size.rounds):
        for side in ("hand", "job") if turn % 2 == 0 else ("job", "hand"):
            if side == "hand":
                speed = hand_turn(body, splits, prec, clock)
            else:
                speed = job_turn(body, splits, clock)
            best[side] = max(best[side], speed)
    ratio = best["job"] / best["hand"]
    bench(f"job_loop_resnet_{prec}_hand_samples_per_s", best["hand"], "samples/s")
    bench(f"job_loop_resnet_{prec}_job_samples_per_s", best["job"], "samples/s")
    bench(f"job_loop_resnet_{prec}_job_vs_hand_x", ratio, "x")
    return ["resnet", prec, f"{best['hand']:,.0f}", f"{best['job']:,.0f}", f"{ratio:.2f}"]


def run(
    quick: bool = False, tiny: bool = False, threads: int = THREADS, cpu_time: bool = False
) -> list[list[str]]:
    torch.set_num_threads(threads)
    size = TINY if tiny else QUICK if quick else FULL
    clock = time.process_time if cpu_time else time.perf_counter
    return [measure(prec, size, clock) for prec in PRECISIONS]


def print_table(rows: list[list[str]], threads: int = THREADS, clock: str = "wall time") -> None:
    title = (
        f"A PyTorch job through the worker against the hand-written loop: residual CNN, CPU, "
        f"batch {BATCH}, {threads} threads, best steady epoch of alternated turns, {clock}"
    )
    print_aligned(title, HEADER, rows, right=range(2, len(HEADER)))


def main() -> None:
    quick = "fewer images and epochs"
    prog = "python -m benchmarks.training.job_loop"
    args = bench_parser(prog, quick=quick, threads=THREADS, timed="epochs").parse_args()
    rows = run(args.quick, args.tiny, args.threads, args.cpu_time)
    print_table(rows, args.threads, "CPU time" if args.cpu_time else "wall time")


if __name__ == "__main__":
    main()
