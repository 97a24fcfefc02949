"""Run as a script: as memory_probe, in TensorFlow: the peak of one training step (a
GradientTape step in a tf.function, XLA-compiled where the graph allows, as the back-end runs
it), measured on its second call so that tracing and compiling are not counted."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import tensorflow as tf

from app.schemas.graph import TensorType, build
from app.schemas.graph.model import GraphSpec
from tests.worker.training.memory_probe import field
from worker.training.tf.graph import build_model


def step_peak(layers: list[dict[str, Any]], shape: list[int], batch: int, classes: int = 10) -> int:
    graph = build(GraphSpec.model_validate({"layers": layers}), TensorType(tuple(shape)), classes)
    model, variables = build_model(graph)
    loss_of = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(jit_compile=graph.xla_on_cpu)
    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_of(y, model(x, training=True))
        return tape.gradient(loss, variables)

    x = tf.random.uniform((batch, *shape))
    y = tf.random.uniform((batch,), maxval=classes, dtype=tf.int32)
    kept = step(x, y)  # traced and compiled; its gradients held, as in training
    Path("/proc/self/clear_refs").write_text("5")
    start = field("VmRSS")
    kept = step(x, y)
    del kept
    return field("VmHWM") - start


def main() -> None:
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    for line in sys.stdin:
        case = json.loads(line)
        peak = step_peak(case["layers"], case["shape"], case["batch"])
        print(json.dumps({"peak": peak}), flush=True)


if __name__ == "__main__":
    main()
