"""`python -m benchmarks [--quick] [--only NAME]`, NAME one of training, streamed,
architectures, hand_written, service, gang: every benchmark, baselines measured in the same
run: training speed against the seeds, a streamed data set against the same data in memory,
the graph models' accuracy, the PyTorch graph model's speed against the same network written
by hand, the service's own costs (the gang among them), or the gang's alone (a 2-node job
against one node's one and two replicas)."""

from __future__ import annotations

import argparse

from benchmarks import machine
from benchmarks.service import __main__ as service
from benchmarks.training import architectures, hand_written, streamed, suite


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="2 epochs, 1 run: a smoke test")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    only = ["training", "streamed", "architectures", "hand_written", "service", "gang"]
    parser.add_argument("--only", choices=only, default=None)
    args = parser.parse_args()
    epochs, runs = (2, 1) if args.quick else (args.epochs, args.runs)
    print(f"machine: {machine.describe()}", flush=True)
    if args.only in (None, "training"):
        rows = suite.run(epochs, runs)
        suite.print_table(rows, epochs, runs)
    if args.only in (None, "streamed"):
        streamed.print_table(streamed.run(epochs, runs), epochs, runs)
    if args.only in (None, "architectures"):
        architectures.print_table(architectures.run(args.quick))
    if args.only in (None, "hand_written"):
        hand_written.print_table(hand_written.run(args.quick))
    if args.only in (None, "service", "gang"):
        report = service.run(args.quick, args.only if args.only == "gang" else None)
        print()
        print(report.table(f"epochal service benchmarks ({machine.describe()})"))


if __name__ == "__main__":
    main()
