"""Print EPOCHAL_TEST_TIME_SCALE for this machine: how much slower than the reference machine
(2 cores, where the tests' wall-clock budgets were sized) a fixed small workload runs, rounded
up to a whole number in [1, 6] past a 10 % tolerance for noise. Most budgets only bound waits
for events, so a larger one costs a passing test little (tests/e2e/test_recovery.py's leases
and graces grow with it).

The workload is what the suite spends its time on: Python bytecode and small numpy matrix
products, one copy per test worker side by side, as the suite runs them (a CPU quota or a
neighbour shows only when both run at once). The median of five rounds counts: the best of a
few short rounds can fall in a quota's unthrottled stretch and read a machine held to a third
of its cores (tests/slow_machine.sh) as a fast one."""

from __future__ import annotations

import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, like one training process
import numpy as np  # noqa: E402

REFERENCE_SECONDS = 0.42  # its best of three rounds on the reference machine (loaded)
WORKERS = int(os.environ.get("TEST_JOBS", "2"))  # the suite's pytest-xdist workers (Makefile)
ROUNDS = 5
TOLERANCE = 0.1


def workload() -> float:
    started = time.perf_counter()
    total = 0
    for i in range(1_500_000):
        total += i * i % 7
    a = np.random.default_rng(0).standard_normal((200, 200))
    for _ in range(100):
        a = np.tanh(a @ a / 200.0)
    return time.perf_counter() - started


def side_by_side(pool: ProcessPoolExecutor) -> float:
    """The slower of WORKERS copies of the workload started together."""
    return max(pool.map(workload_in_child, range(WORKERS)))


def workload_in_child(_: int) -> float:
    """The workload, in a pool process."""
    return workload()


def main() -> None:
    with ProcessPoolExecutor(WORKERS) as pool:
        # A first round starts the processes and imports numpy; it does not count.
        list(pool.map(workload_in_child, range(WORKERS)))
        rounds = sorted(side_by_side(pool) for _ in range(ROUNDS))
    median = rounds[ROUNDS // 2]
    scale = min(max(math.ceil(median / REFERENCE_SECONDS - TOLERANCE), 1), 6)
    print(
        f"machine speed: workload {median:.3f}s (rounds {', '.join(f'{r:.2f}' for r in rounds)}), "
        f"reference {REFERENCE_SECONDS:.3f}s "
        f"-> EPOCHAL_TEST_TIME_SCALE={scale}",
        file=sys.stderr,
    )
    print(scale)


if __name__ == "__main__":
    main()
