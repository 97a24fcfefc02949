"""model.onnx from the spec and the weights alone: one exporter for both frameworks.

Both back-ends hold the same variables in Keras layout and in the graph's order
(worker.training.init), so the graph is emitted here from the spec: each node asks its op
(app.schemas.graph) to emit itself, on channels-last tensors as the spec writes shapes; an op
that ONNX defines channels first (Conv, the pools) transposes around itself. The graph takes
RAW rows: its first nodes are the job's normalization, (x - shift) / scale in float32, then
dataset.augment's deterministic steps (app.schemas.augment.eval_steps: resize, centre crop,
per-channel normalize, each op's nodes from worker.training.data.augment), then the reshape
into the shape the graph reads ((H, W) images gain their channel axis). So an image data set's
model takes images at their stored size, pixels as stored, as evaluation reads them.

The file names where its first weights came from in its metadata_props (`lineage_props`), so a
model.onnx copied away from the service still says which job it was warm-started from or
continues.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from app.schemas.augment import Step
from app.schemas.dataset_spec import model_input
from app.schemas.graph import INPUT as GRAPH_INPUT
from app.schemas.graph import BuiltGraph
from app.schemas.graph.kits import OnnxKit, OnnxValue
from app.schemas.job_spec import JobSpec
from app.schemas.spec_graph import built_model
from worker.training.data.augment import augment_onnx

OPSET = 17
IR_VERSION = 8  # what opset 17 came with: every onnxruntime that runs opset 17 loads it
INPUT = "input"


def output_name(task: str) -> str:
    return "logits" if task == "classification" else "values"


class GraphBuilder:
    """Nodes and initializers in order; each op's output gets the next fresh name. This is
    the kit an op's onnx() gets."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def const(self, value: OnnxValue, hint: str) -> str:
        name = f"{hint}:{len(self.initializers)}"  # never an op output's name
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], out: str | None = None, /, **attrs: Any) -> str:
        self._count += 1
        name = out or f"{op_type.lower()}_{self._count}"
        node = helper.make_node(op_type, inputs, [name], name=f"n{self._count}", **attrs)
        self.nodes.append(node)
        return name

    def channels_first(self, x: str, rank: int) -> str:
        """(N, ..., C) -> (N, C, ...) for a tensor of `rank` axes, batch included."""
        return self.op("Transpose", [x], perm=[0, rank - 1, *range(1, rank - 1)])

    def channels_last(self, x: str, rank: int) -> str:
        return self.op("Transpose", [x], perm=[0, *range(2, rank), 1])


def _emit(g: OnnxKit, graph: BuiltGraph, x: str, weights: list[np.ndarray]) -> str:
    """Every node of the graph in order; returns the last one's output. `g` is typed as the
    kit the ops' onnx() take, so mypy checks the GraphBuilder handed in against it."""
    values = {GRAPH_INPUT: x}
    remaining: Iterator[np.ndarray] = iter(weights)
    for node in graph.nodes:
        count = len(node.variables())
        own = [np.asarray(next(remaining), dtype=np.float32) for _ in range(count)]
        inputs = [values[name] for name in node.inputs]
        values[node.name] = node.op.onnx(g, inputs, own, list(node.types))
    if next(remaining, None) is not None:
        raise ValueError("the model has more variables than its spec describes")
    return values[graph.output]


def build_onnx(
    spec: JobSpec,
    weights: list[np.ndarray],
    row_shape: tuple[int, ...],
    outputs: int,
    scale: np.ndarray,
    shift: np.ndarray,
    tokens: bool = False,
    lineage: dict[str, Any] | None = None,
    steps: Sequence[Step] = (),
) -> onnx.ModelProto:
    """The whole model, raw rows of `row_shape` in; `weights` in Keras layout and graph order
    (get_weights()). Token ids come in as float32 too (the graph's embedding casts them), so
    every model.onnx takes the same input whatever its data. `lineage`: the job's
    (worker.training.warm_start), written into the metadata. `steps`: the deterministic
    augmentation steps (eval_steps), applied after the normalization."""
    g = GraphBuilder()
    shifted = g.op("Sub", [INPUT, g.const(np.asarray(shift, np.float32), "shift")])
    x = g.op("Div", [shifted, g.const(np.asarray(scale, np.float32), "scale")])
    x, shape = augment_onnx(g, x, steps, row_shape)
    graph = built_model(spec, model_input(spec, shape, tokens), outputs)
    if graph.input.shape != shape:
        x = g.op("Reshape", [x, g.const(np.array([-1, *graph.input.shape], np.int64), "shape")])
    out = output_name(spec.task)
    g.op("Identity", [_emit(g, graph, x, weights)], out)
    onnx_graph = helper.make_graph(
        g.nodes,
        f"epochal-{spec.model.type}",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["N", *row_shape])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["N", outputs])],
        g.initializers,
    )
    model = _checked(onnx_graph)
    if props := lineage_props(lineage):
        helper.set_model_props(model, props)
    return model


def lineage_props(lineage: dict[str, Any] | None) -> dict[str, str]:
    """The metadata_props that name a job's parent: epochal.continues (the job it goes on
    from: every node), or epochal.init_from_job with epochal.init_nodes (comma-separated: a
    node's name has no comma) and epochal.init_checkpoint."""
    if not lineage:
        return {}
    if "continues" in lineage:
        return {"epochal.continues": str(lineage["continues"])}
    return {
        "epochal.init_from_job": str(lineage["from_job"]),
        "epochal.init_nodes": ",".join(lineage["nodes"]),
        "epochal.init_checkpoint": str(lineage["checkpoint"]),
    }


def _checked(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="epochal",
        ir_version=IR_VERSION,
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def preload() -> None:
    """Pay the export's first-use costs before a job arrives (a warm child calls this): ONNX
    Runtime's import and first session, the checker's first full check."""
    row = helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["N", 1])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 1])
    identity = helper.make_node("Identity", [INPUT], ["out"])
    model = _checked(helper.make_graph([identity], "preload", [row], [out]))
    run_onnx(model.SerializeToString(), np.zeros((1, 1), np.float32))


def run_onnx(model: bytes, raw: np.ndarray, threads: int = 1) -> np.ndarray:
    """The model's output for raw rows, by ONNX Runtime on the CPU."""
    import onnxruntime as ort  # only where a model is run

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    (result,) = session.run(None, {INPUT: np.ascontiguousarray(raw, dtype=np.float32)})
    return np.asarray(result)
