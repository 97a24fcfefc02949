"""`python -m benchmarks [--quick] [--only NAME] [--epochs N] [--images N]`, NAME one of training,
streamed, image_loader, image_accuracy, checkpoints, architectures, hand_written, warm_start,
service or gang: every benchmark, baselines measured in the same run. Training speed against the
seeds; a streamed data set against the same data in memory; the streaming loader of a folder of
JPEG files against the residual CNN it feeds; the residual CNN's test accuracy, augmented, from
Fashion-MNIST as PNG folders (`--epochs`, default 30, and `--images`, the first N of each split);
a checkpoint's cost on the training path with an S3 store against the default one; the
graph models' accuracy; the PyTorch graph model's speed against the same network written by
hand, a PyTorch job's through the worker against the hand-written loop, and TensorFlow's bf16
policy against its fp32; a warm-started fine-tune against the same graph from scratch; the
service's own costs (the gang among them), or the gang's alone (a 2-node job against one
node's one and two replicas)."""

from __future__ import annotations

import argparse

from benchmarks import machine
from benchmarks.service import __main__ as service
from benchmarks.training import (
    architectures,
    checkpoint_cost,
    hand_written,
    image_accuracy,
    image_loader,
    job_loop,
    streamed,
    suite,
    tf_precision,
    warm_start,
)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="2 epochs, 1 run: a smoke test")
    parser.add_argument("--epochs", type=int, default=None, help="default 5 (image_accuracy: 30)")
    parser.add_argument("--images", type=int, default=None, help="image_accuracy: first N each")
    parser.add_argument("--runs", type=int, default=3)
    only = ["training", "streamed", "image_loader", "image_accuracy", "checkpoints"]
    only += ["architectures"]
    only += ["hand_written", "warm_start", "service", "gang"]
    parser.add_argument("--only", choices=only, default=None)
    args = parser.parse_args()
    epochs, runs = (2, 1) if args.quick else (args.epochs or 5, args.runs)
    print(f"machine: {machine.describe()}", flush=True)
    if args.only in (None, "training"):
        rows = suite.run(epochs, runs)
        suite.print_table(rows, epochs, runs)
    if args.only in (None, "streamed"):
        streamed.print_table(streamed.run(epochs, runs), epochs, runs)
    if args.only in (None, "image_loader"):
        images = image_loader.TINY if args.quick else image_loader.FULL
        image_loader.print_table(image_loader.run(images), images)
    if args.only in (None, "image_accuracy"):
        accuracy_sizes = image_accuracy.sizes(
            image_accuracy.QUICK if args.quick else image_accuracy.FULL, args.epochs, args.images
        )
        results = image_accuracy.run(accuracy_sizes)
        image_accuracy.print_table(image_accuracy.report(results), results)
    if args.only in (None, "checkpoints"):
        cp_epochs = min(epochs, 3)  # a checkpoint each epoch: a few show the per-epoch cost
        checkpoint_cost.print_table(checkpoint_cost.run(cp_epochs, runs), cp_epochs, runs)
    if args.only in (None, "architectures"):
        architectures.print_table(architectures.run(args.quick))
    if args.only in (None, "hand_written"):
        hand_written.print_table(hand_written.run(args.quick))
        job_loop.print_table(job_loop.run(args.quick))
        tf_precision.print_table(tf_precision.run(args.quick))
    if args.only in (None, "warm_start"):
        sizes = warm_start.QUICK if args.quick else warm_start.FULL
        warm_start.print_table(warm_start.run(sizes))
    if args.only in (None, "service", "gang"):
        report = service.run(args.quick, args.only if args.only == "gang" else None)
        print()
        print(report.table(f"epochal service benchmarks ({machine.describe()})"))


if __name__ == "__main__":
    main()
