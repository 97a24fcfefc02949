"""TensorFlow's mixed_bfloat16 policy against float32 for the residual CNN, through the worker.

`python -m benchmarks --only hand_written [--quick]`, or
`python -m benchmarks.training.tf_precision [--tiny|--quick] [--threads N] [--cpu-time]`:
the residual CNN of examples/residual-fashion-mnist.yaml as a TensorFlow job (the worker's
attempt in-process, as benchmarks.training.job_loop runs the PyTorch one), on the same images,
batch and epochs, with `resources.precision` fp32 and bf16 (Keras' mixed_bfloat16 policy:
bf16 compute, float32 variables, loss and optimizer). The two take turns; each keeps its best
steady epoch, by the same clock as job_loop. Whether bf16 pays on a CPU depends on the
TensorFlow build's oneDNN kernels for the CPU's bf16 units (AVX-512-BF16, AMX).
"""

from __future__ import annotations

import time

from benchmarks.training.common import bench_parser, print_aligned
from benchmarks.training.hand_written import PRECISIONS, THREADS
from benchmarks.training.job_loop import FULL, QUICK, TINY, Clock, Size, job_spec, job_turn
from benchmarks.training.suite import bench

HEADER = ["network", "fp32 samples/s", "bf16 samples/s", "bf16 / fp32"]


def measure(size: Size, clock: Clock, threads: int) -> list[str]:
    from app.schemas.job_spec import JobSpec
    from benchmarks.training.common import DATA_DIR
    from worker.training.data import load_splits

    bodies = {prec: job_spec(prec, size) | {"framework": "tensorflow"} for prec in PRECISIONS}
    splits = load_splits(JobSpec.model_validate(bodies["fp32"]), DATA_DIR)
    best = dict.fromkeys(PRECISIONS, 0.0)
    for turn in range(size.rounds):
        for prec in PRECISIONS if turn % 2 == 0 else tuple(reversed(PRECISIONS)):
            best[prec] = max(best[prec], job_turn(bodies[prec], splits, clock, threads))
    ratio = best["bf16"] / best["fp32"]
    for prec, speed in best.items():
        bench(f"tf_precision_resnet_{prec}_samples_per_s", speed, "samples/s")
    bench("tf_precision_resnet_bf16_vs_fp32_x", ratio, "x")
    return ["resnet", f"{best['fp32']:,.0f}", f"{best['bf16']:,.0f}", f"{ratio:.2f}"]


def run(
    quick: bool = False, tiny: bool = False, threads: int = THREADS, cpu_time: bool = False
) -> list[list[str]]:
    size = TINY if tiny else QUICK if quick else FULL
    clock = time.process_time if cpu_time else time.perf_counter
    return [measure(size, clock, threads)]


def print_table(rows: list[list[str]], threads: int = THREADS, clock: str = "wall time") -> None:
    title = (
        f"TensorFlow mixed_bfloat16 against float32 through the worker: residual CNN, CPU, "
        f"{threads} threads, best steady epoch of alternated turns, {clock}"
    )
    print_aligned(title, HEADER, rows, right=range(1, len(HEADER)))


def main() -> None:
    quick = "fewer images and epochs"
    prog = "python -m benchmarks.training.tf_precision"
    args = bench_parser(prog, quick=quick, threads=THREADS, timed="epochs").parse_args()
    rows = run(args.quick, args.tiny, args.threads, args.cpu_time)
    print_table(rows, args.threads, "CPU time" if args.cpu_time else "wall time")


if __name__ == "__main__":
    main()
