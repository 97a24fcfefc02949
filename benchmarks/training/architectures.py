"""Graph models on Fashion-MNIST in both frameworks: what the example graphs reach.

`python -m benchmarks --only architectures [--quick]`:
- the residual CNN of examples/residual-fashion-mnist.yaml through a live service (embedded
  default, as `make run`), on the whole training set (no validation split), test accuracy and
  samples/s per framework;
- the MLP, a row-LSTM and a transformer over rows, in-process (the worker's own attempt), the
  validation accuracy after each of the first three epochs, per framework.
Each model's spec is read from examples/, so the benchmark trains what the docs show.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from benchmarks.training.suite import bench, run_case

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RESNET = "residual-fashion-mnist.yaml"
CURVES = {
    "mlp": "graph-mlp-fashion.yaml",
    "row_lstm": "lstm-rows-fashion-mnist.yaml",
    "transformer": "transformer-rows-fashion-mnist.yaml",
}
FRAMEWORKS = ("pytorch", "tensorflow")


def example(name: str, framework: str, **training: Any) -> dict[str, Any]:
    spec = yaml.safe_load((EXAMPLES / name).read_text())
    spec["framework"] = framework
    spec["training"] = {**spec.get("training", {}), **training}
    return dict(spec)


def resnet_through_service(quick: bool) -> list[list[str]]:
    """Test accuracy and whole-job samples/s of the residual CNN, one job per framework."""
    from benchmarks.training.service import service_samples_per_second

    epochs = 1 if quick else None  # the example's own epoch count
    specs = {}
    for framework in FRAMEWORKS:
        spec = example(RESNET, framework)
        spec["dataset"]["validation_split"] = 0.0
        if epochs:
            spec["training"]["epochs"] = epochs
            spec["dataset"]["limit"] = 6000
        specs[framework] = spec
    measured = service_samples_per_second(specs, runs=1)
    rows = []
    for framework, result in measured.items():
        accuracy, speed = result["accuracy"][0], result["samples_per_second"][0]
        bench(f"resnet_{framework}_test_accuracy", accuracy, "fraction")
        bench(f"resnet_{framework}_service_samples_per_s", speed, "samples/s")
        rows.append([f"resnet {framework}", f"{speed:,.0f}", f"{accuracy:.4f}"])
    gap = abs(measured["pytorch"]["accuracy"][0] - measured["tensorflow"]["accuracy"][0])
    bench("resnet_framework_gap_points", 100 * gap, "points")
    return rows


def curves(quick: bool) -> list[list[str]]:
    """Validation accuracy after epochs 1..3 of each model, in a fresh process each."""
    rows = []
    for model, name in CURVES.items():
        for framework in FRAMEWORKS:
            spec = example(name, framework, epochs=1 if quick else 3)
            if quick:
                spec["dataset"]["limit"] = 3000
            result = run_case(repr(spec), module="benchmarks.training.curve")
            accuracies = result["val_accuracy"]
            for epoch, value in enumerate(accuracies, start=1):
                bench(f"{model}_{framework}_val_accuracy_epoch{epoch}", value, "fraction")
            bench(f"{model}_{framework}_samples_per_s", result["samples_per_second"], "samples/s")
            cells = " ".join(f"{a:.4f}" for a in accuracies)
            rows.append([f"{model} {framework}", f"{result['samples_per_second']:,.0f}", cells])
    return rows


def run(quick: bool) -> list[list[str]]:
    return resnet_through_service(quick) + curves(quick)


def print_table(rows: list[list[str]]) -> None:
    header = ["model", "samples/s", "test accuracy / val accuracy by epoch"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    print("\nGraph models on Fashion-MNIST")
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
