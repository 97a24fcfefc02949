"""`python -m benchmarks [--quick]`: every benchmark, baselines measured in the same run."""

from __future__ import annotations

import argparse

from benchmarks import machine
from benchmarks.training import suite


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="2 epochs, 1 run: a smoke test")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    epochs, runs = (2, 1) if args.quick else (args.epochs, args.runs)
    print(f"machine: {machine.describe()}", flush=True)
    rows = suite.run(epochs, runs)
    suite.print_table(rows, epochs, runs)


if __name__ == "__main__":
    main()
