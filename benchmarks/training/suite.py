"""Training speed against the seeds, measured side by side in one run; prints a table and
`BENCH <name> <value> <unit>` lines.

Each direct case runs in a fresh process (benchmarks.training.cases); seed and engine runs are
interleaved so a slow moment on a shared machine hits both; ratios are medians of per-run
ratios. Throughput is training samples per second over the epochs after the first (the first
pays tracing and XLA compilation); the end-to-end figure through the service is the whole job.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from statistics import median
from typing import Any

from benchmarks.training.common import seed_equivalent_spec


def run_case(*args: str | int, module: str = "benchmarks.training.cases") -> dict[str, Any]:
    """`python -m module *args` in a fresh process; its last `RESULT {json}` line."""
    argv = [sys.executable, "-m", module, *map(str, args)]
    started = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started  # the whole script: start, imports, data, training
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"benchmark case {args} failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(lines[-1][len("RESULT ") :])) | {"wall": wall}


def bench(name: str, value: float, unit: str) -> None:
    print(f"BENCH {name} {value:.6g} {unit}", flush=True)


def run(epochs: int, runs: int) -> list[list[str]]:
    """Measure everything; print BENCH lines as results arrive; return the table's rows."""
    table: list[list[str]] = []
    for framework in ("pytorch", "tensorflow"):
        cases = [f"{framework}_seed", f"{framework}_engine"]
        cases += ["keras_fit"] if framework == "tensorflow" else []
        results: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
        for _ in range(runs):
            for case in cases:
                results[case].append(run_case(case, epochs))
        seed = results[f"{framework}_seed"]
        for case in cases:
            speeds = [r["samples_per_second"] for r in results[case]]
            ratio = median(s / b["samples_per_second"] for s, b in zip(speeds, seed, strict=True))
            accuracy = median(r["accuracy"] for r in results[case])
            bench(f"{case}_samples_per_s", median(speeds), "samples/s")
            bench(f"{case}_test_accuracy", accuracy, "fraction")
            if case != f"{framework}_seed":
                bench(f"{case.replace('_engine', '')}_vs_seed_x", ratio, "x")
            table.append([case, f"{median(speeds):,.0f}", f"{ratio:.2f}", f"{accuracy:.4f}"])
        table.append(_through_service(framework, seed, epochs, runs))
    return table


def _through_service(
    framework: str, seed: list[dict[str, Any]], epochs: int, runs: int
) -> list[str]:
    from benchmarks.training.service import service_samples_per_second

    spec = seed_equivalent_spec(framework, epochs)
    measured = service_samples_per_second({framework: spec}, runs)[framework]
    speed = median(measured["samples_per_second"])
    # Against the seed run as a script start to finish (imports, data, training, test): what
    # a user waits for either way. Only comparable when both ran the same number of epochs.
    seed_script = median(r["samples"] * len(r["seconds"]) / r["wall"] for r in seed)
    ratio = speed / seed_script
    bench(f"{framework}_seed_script_samples_per_s", seed_script, "samples/s")
    accuracy = median(measured["accuracy"])
    bench(f"{framework}_service_samples_per_s", speed, "samples/s")
    bench(f"{framework}_service_vs_seed_x", ratio, "x")
    bench(f"{framework}_service_test_accuracy", accuracy, "fraction")
    name = f"{framework}_service (whole job vs whole seed script)"
    return [name, f"{speed:,.0f}", f"{ratio:.2f}", f"{accuracy:.4f}"]


def print_table(rows: list[list[str]], epochs: int, runs: int) -> None:
    header = ["case", "samples/s", "x seed", "test accuracy"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    print(f"\nTraining on Fashion-MNIST ({epochs} epochs x {runs} runs per direct case)")
    for row in [header, ["-" * w for w in widths], *rows]:
        print(
            "  ".join(
                cell.rjust(w) if i else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )
