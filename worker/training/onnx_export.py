"""model.onnx from the spec and the weights alone: one exporter for both frameworks.

Both back-ends hold the same variables in Keras layout and order (worker.training.init), so the
graph is built here from the spec, the way worker.training.torch.models and tf.models build the
network: Dense is a Gemm on [in, out] kernels; Conv is NCHW with the kernel as OIHW and Keras'
'same' padding (the odd pixel of an even kernel padded after); 2x2 pooling with stride 2 drops a
trailing odd row and column; feature maps are flattened in NHWC order (channels last), as both
back-ends do; gelu is the exact erf form; dropout does nothing at inference. The graph takes RAW
rows: its first two nodes are the job's normalization, (x - shift) / scale in float32.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from app.schemas.job_spec import CNNSpec, JobSpec, MLPSpec

OPSET = 17
IR_VERSION = 8  # what opset 17 came with: every onnxruntime that runs opset 17 loads it
INPUT = "input"
BN_EPSILON = 1e-3  # Keras' default; the PyTorch back-end builds its BatchNorm1d with it too


def output_name(task: str) -> str:
    return "logits" if task == "classification" else "values"


class GraphBuilder:
    """Nodes and initializers in order; each op's output gets the next fresh name."""

    def __init__(self, weights: list[np.ndarray]) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._weights: Iterator[np.ndarray] = iter(weights)
        self._count = 0

    def const(self, value: np.ndarray, hint: str) -> str:
        name = f"{hint}_{len(self.initializers)}"
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self) -> np.ndarray:
        return np.asarray(next(self._weights), dtype=np.float32)

    def check_all_used(self) -> None:
        if next(self._weights, None) is not None:
            raise ValueError("the model has more variables than its spec describes")

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs: object) -> str:
        self._count += 1
        name = out or f"{op_type.lower()}_{self._count}"
        node = helper.make_node(op_type, inputs, [name], name=f"n{self._count}", **attrs)
        self.nodes.append(node)
        return name

    def activation(self, x: str, kind: str) -> str:
        if kind == "gelu":  # opset 17 has no Gelu: x * 0.5 * (1 + erf(x / sqrt(2)))
            scaled = self.op("Div", [x, self.const(np.float32(math.sqrt(2.0)), "sqrt2")])
            one = self.op("Add", [self.op("Erf", [scaled]), self.const(np.float32(1.0), "one")])
            return self.op("Mul", [self.op("Mul", [x, one]), self.const(np.float32(0.5), "half")])
        return self.op({"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}[kind], [x])

    def dense(self, x: str, out: str | None = None) -> str:
        kernel, bias = self.weight(), self.weight()
        return self.op("Gemm", [x, self.const(kernel, "kernel"), self.const(bias, "bias")], out)

    def batch_norm(self, x: str) -> str:
        names = [self.const(self.weight(), role) for role in ("gamma", "beta", "mean", "var")]
        return self.op("BatchNormalization", [x, *names], epsilon=BN_EPSILON)

    def dense_stack(self, x: str, units: list[int], activation: str, batch_norm: bool) -> str:
        for _ in units:
            x = self.dense(x)
            if batch_norm:
                x = self.batch_norm(x)
            x = self.activation(x, activation)
        return x

    def conv(self, x: str, spec: CNNSpec) -> str:
        kernel = self.weight().transpose(3, 2, 0, 1)  # [kh, kw, in, out] -> OIHW
        bias = self.weight()
        total = spec.kernel_size - 1  # 'same': the odd pixel goes after (bottom, right)
        pads = [total // 2, total // 2, total - total // 2, total - total // 2]
        inputs = [x, self.const(np.ascontiguousarray(kernel), "conv"), self.const(bias, "bias")]
        size = [spec.kernel_size] * 2
        return self.op("Conv", inputs, kernel_shape=size, pads=pads, strides=[1, 1])

    def pool(self, x: str, kind: str) -> str:
        if kind == "none":
            return x
        op_type = "MaxPool" if kind == "max" else "AveragePool"
        return self.op(op_type, [x], kernel_shape=[2, 2], strides=[2, 2])


def _mlp(g: GraphBuilder, x: str, spec: MLPSpec, out: str) -> None:
    x = g.op("Flatten", [x], axis=1)
    x = g.dense_stack(x, spec.hidden_units, spec.activation, spec.batch_norm)
    g.dense(x, out)


def _cnn(g: GraphBuilder, x: str, spec: CNNSpec, row_shape: tuple[int, ...], out: str) -> None:
    if len(row_shape) == 2:  # [N, H, W] -> [N, 1, H, W]
        x = g.op("Unsqueeze", [x, g.const(np.array([1], np.int64), "axes")])
    else:  # [N, H, W, C] -> NCHW
        x = g.op("Transpose", [x], perm=[0, 3, 1, 2])
    for _ in spec.conv_channels:
        x = g.pool(g.activation(g.conv(x, spec), spec.activation), spec.pool)
    x = g.op("Flatten", [g.op("Transpose", [x], perm=[0, 2, 3, 1])], axis=1)  # NHWC order
    x = g.dense_stack(x, spec.dense_units, spec.activation, batch_norm=False)
    g.dense(x, out)


def build_onnx(
    spec: JobSpec,
    weights: list[np.ndarray],
    row_shape: tuple[int, ...],
    outputs: int,
    scale: np.ndarray,
    shift: np.ndarray,
) -> onnx.ModelProto:
    """The whole model, raw rows in; `weights` in Keras layout and order (get_weights())."""
    g = GraphBuilder(weights)
    shifted = g.op("Sub", [INPUT, g.const(np.asarray(shift, np.float32), "shift")])
    x = g.op("Div", [shifted, g.const(np.asarray(scale, np.float32), "scale")])
    out = output_name(spec.task)
    if isinstance(spec.model, MLPSpec):
        _mlp(g, x, spec.model, out)
    else:
        _cnn(g, x, spec.model, row_shape, out)
    g.check_all_used()
    graph = helper.make_graph(
        g.nodes,
        f"epochal-{spec.model.type}",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["N", *row_shape])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["N", outputs])],
        g.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="epochal",
        ir_version=IR_VERSION,
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def run_onnx(model: bytes, raw: np.ndarray, threads: int = 1) -> np.ndarray:
    """The model's output for raw rows, by ONNX Runtime on the CPU."""
    import onnxruntime as ort  # only where a model is run

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    (result,) = session.run(None, {INPUT: np.ascontiguousarray(raw, dtype=np.float32)})
    return np.asarray(result)
