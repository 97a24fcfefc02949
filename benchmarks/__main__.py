"""`python -m benchmarks [--quick] [--only training|architectures|service]`: every benchmark,
baselines measured in the same run: training speed against the seeds, the graph models'
accuracy, then the service's own costs."""

from __future__ import annotations

import argparse

from benchmarks import machine
from benchmarks.service import __main__ as service
from benchmarks.training import architectures, suite


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="2 epochs, 1 run: a smoke test")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["training", "architectures", "service"], default=None)
    args = parser.parse_args()
    epochs, runs = (2, 1) if args.quick else (args.epochs, args.runs)
    print(f"machine: {machine.describe()}", flush=True)
    if args.only in (None, "training"):
        rows = suite.run(epochs, runs)
        suite.print_table(rows, epochs, runs)
    if args.only in (None, "architectures"):
        architectures.print_table(architectures.run(args.quick))
    if args.only in (None, "service"):
        report = service.run(args.quick)
        print()
        print(report.table(f"epochal service benchmarks ({machine.describe()})"))


if __name__ == "__main__":
    main()
