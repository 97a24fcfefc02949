"""Small exported models as the worker writes them (its export contract): `model/model.onnx` that
takes raw rows (normalization first, then flatten, then an MLP) and `model/model-card.json`.

Built with the `onnx` package's helpers from random weights; `reference` computes the same
logits with numpy, so a test can check what the API answers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from app.domain.job_files import JobFiles


@dataclass(frozen=True)
class TinyModel:
    """Weights and normalization of a model written by `write_model`."""

    row_shape: tuple[int, ...]
    scale: float
    shift: float
    layers: list[tuple[np.ndarray, np.ndarray]]
    task: str

    def reference(self, rows: np.ndarray) -> np.ndarray:
        """The model's outputs for raw rows, in float64 numpy."""
        x = (rows.reshape(len(rows), -1).astype(np.float64) - self.shift) / self.scale
        for i, (weight, bias) in enumerate(self.layers):
            x = x @ weight + bias
            if i < len(self.layers) - 1:
                x = np.maximum(x, 0.0)
        return x


def _graph(model: TinyModel, output: str) -> onnx.GraphProto:
    nodes = [
        helper.make_node("Sub", ["input", "shift"], ["shifted"]),
        helper.make_node("Div", ["shifted", "scale"], ["normalized"]),
        helper.make_node("Flatten", ["normalized"], ["h0"], axis=1),
    ]
    init = [
        numpy_helper.from_array(np.array(model.shift, np.float32), "shift"),
        numpy_helper.from_array(np.array(model.scale, np.float32), "scale"),
    ]
    for i, (weight, bias) in enumerate(model.layers):
        last = i == len(model.layers) - 1
        out = output if last else f"z{i + 1}"
        nodes.append(helper.make_node("Gemm", [f"h{i}", f"w{i}", f"b{i}"], [out]))
        init += [
            numpy_helper.from_array(weight.astype(np.float32), f"w{i}"),
            numpy_helper.from_array(bias.astype(np.float32), f"b{i}"),
        ]
        if not last:
            nodes.append(helper.make_node("Relu", [out], [f"h{i + 1}"]))
    outputs = model.layers[-1][1].shape[0]
    return helper.make_graph(
        nodes,
        "tiny-mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", *model.row_shape])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["N", outputs])],
        init,
    )


def write_model(
    job_dir: Path,
    row_shape: tuple[int, ...] = (64,),
    hidden: tuple[int, ...] = (16,),
    outputs: int = 10,
    task: str = "classification",
    classes: list[Any] | None = None,
    scale: float = 16.0,
    seed: int = 0,
) -> TinyModel:
    """Write model/model.onnx and model/model-card.json into a job's directory."""
    rng = np.random.default_rng(seed)
    sizes = [math.prod(row_shape), *hidden, outputs]
    layers = [
        (rng.normal(0, 1 / math.sqrt(a), (a, b)), rng.normal(0, 0.1, b))
        for a, b in zip(sizes, sizes[1:], strict=False)
    ]
    model = TinyModel(row_shape, scale, 0.0, layers, task)
    output = "logits" if task == "classification" else "values"
    proto = helper.make_model(
        _graph(model, output), opset_imports=[helper.make_opsetid("", 17)], ir_version=8
    )
    onnx.checker.check_model(proto)
    files = JobFiles(job_dir)
    folder = files.model_dir
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, str(files.onnx))
    if task == "classification" and classes is None:
        classes = list(range(outputs))
    card = {
        "format_version": 1,
        "framework": "pytorch",
        "task": task,
        "input": {"name": "input", "dtype": "float32", "shape": [None, *row_shape]},
        "output": {"name": output, "shape": [None, outputs]},
        "normalization": {"kind": "unit", "scale": scale, "shift": 0.0},
        "classes": classes if task == "classification" else None,
    }
    files.model_card.write_text(json.dumps(card))
    return model
