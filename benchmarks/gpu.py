"""`python -m benchmarks.gpu` (`make bench-gpu`): samples/s on one GPU, fp32 against bf16.

The seeds' two MLPs and a CNN, at a large batch (1024) on Fashion-MNIST, run by the worker's
own back-ends (the same run_attempt a job runs) in a fresh process per case. Without a GPU it
says so and exits 0: nothing here is simulated.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from benchmarks import machine

BATCH, EPOCHS = 1024, 4
FRAMEWORKS = ("pytorch", "tensorflow")
MODELS: dict[str, dict[str, Any]] = {
    "pytorch-seed-mlp": {"type": "mlp", "hidden_units": [128]},
    "tensorflow-seed-mlp": {"type": "mlp", "hidden_units": [128, 64]},
    "cnn-32-64": {"type": "cnn", "conv_channels": [32, 64], "dense_units": [128]},
}


def gpu_names(framework: str) -> list[str]:
    """The GPUs `framework` sees, by name; empty without one (each probed in its own process)."""
    try:
        if framework == "pytorch":
            import torch

            if not torch.cuda.is_available():
                return []
            return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        details = [tf.config.experimental.get_device_details(gpu) for gpu in gpus]
        return [str(d.get("device_name", gpu.name)) for d, gpu in zip(details, gpus, strict=True)]
    except ImportError:
        return []


def visible_gpus(frameworks: tuple[str, ...] = FRAMEWORKS) -> dict[str, list[str]]:
    """Each framework's GPUs, probed in a fresh process each: CUDA started here would stay."""
    from benchmarks.training.suite import run_case

    return {f: run_case("--probe", f, module="benchmarks.gpu")["devices"] for f in frameworks}


def case(framework: str, model: str, precision: str) -> dict[str, Any]:
    from benchmarks.training.common import engine

    body = {
        "framework": framework,
        "dataset": {"name": "fashion_mnist", "validation_split": 0.0},
        "model": MODELS[model],
        "training": {"epochs": EPOCHS, "batch_size": BATCH},
        "resources": {"gpus": 1, "precision": precision},
    }
    return engine(body, gpus=[0]).to_json()


def main() -> int:
    print(f"machine: {machine.describe()}", flush=True)
    from benchmarks.training.suite import bench, run_case

    devices = {f: names[0] for f, names in visible_gpus().items() if names}
    if not devices:
        print("no GPU visible to PyTorch or TensorFlow here: nothing to measure (exit 0)")
        return 0
    print(f"{'framework':<11} {'device':<28} {'model':<20} {'fp32 samples/s':>15} {'bf16':>12}")
    for framework, device in devices.items():
        for model in MODELS:
            speed = {
                p: run_case("--case", framework, model, p, module="benchmarks.gpu")
                for p in ("fp32", "bf16")
            }
            fp32, bf16 = (speed[p]["samples_per_second"] for p in ("fp32", "bf16"))
            print(f"{framework:<11} {device[:28]:<28} {model:<20} {fp32:>15,.0f} {bf16:>12,.0f}")
            bench(f"gpu_{framework}_{model}_fp32_samples_per_s", fp32, "samples/s")
            bench(f"gpu_{framework}_{model}_bf16_samples_per_s", bf16, "samples/s")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--probe"]:
        print("RESULT " + json.dumps({"devices": gpu_names(sys.argv[2])}))
    elif sys.argv[1:2] == ["--case"]:
        print("RESULT " + json.dumps(case(*sys.argv[2:5])))
    else:
        sys.exit(main())
