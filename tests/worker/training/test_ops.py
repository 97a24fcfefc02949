"""Every op means one thing in PyTorch, TensorFlow and model.onnx.

For each case of op_cases: the same graph built in both frameworks has the same trainable
parameters (as PyTorch's parameters() and Keras' trainable variables count them, and as the
summary says); from the same random weights both give the same outputs, and ONNX Runtime gives
them too. Ops with a training-time behaviour (batch statistics) are compared in training mode.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.schemas.graph import OPS, BuiltGraph, GraphSpec, TensorType, build
from app.schemas.job_spec import JobSpec
from tests.worker.training.op_cases import CASES, Case
from worker.training.onnx_export import build_onnx, run_onnx

pytestmark = [pytest.mark.torch, pytest.mark.tf]
TOLERANCE = 1e-5
BATCH = 7


def built(case: Case) -> BuiltGraph:
    graph = GraphSpec.model_validate({"layers": case.layers}, strict=False)
    x = TensorType(case.shape, tokens=case.vocab is not None, vocab=case.vocab)
    return build(graph, x, case.outputs)


def weights_for(graph: BuiltGraph, seed: int) -> list[np.ndarray]:
    """Random values no initializer would draw; variances positive."""
    rng = np.random.default_rng(seed)
    out = []
    for v in graph.variables():
        if "variance" in v.name:
            out.append(rng.uniform(0.5, 1.5, v.shape).astype(np.float32))
        else:
            out.append(rng.normal(0.0, 0.5, v.shape).astype(np.float32))
    return out


def samples(case: Case, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if case.vocab is not None:
        return rng.integers(0, case.vocab, (BATCH, *case.shape)).astype(np.int32)
    return rng.normal(0.0, 1.0, (BATCH, *case.shape)).astype(np.float32)


def torch_outputs(graph: BuiltGraph, weights: list[np.ndarray], x: np.ndarray, training: bool):
    import torch

    from worker.training.torch.graph import GraphModule

    module = GraphModule(graph)
    with torch.no_grad():
        for tensor, value in zip(module.variables(), weights, strict=True):
            tensor.copy_(torch.from_numpy(value))
    module.train(training)
    with torch.no_grad():
        y = module(torch.from_numpy(x)).numpy()
    count = sum(p.numel() for p in module.parameters())
    return y, [t.detach().numpy().copy() for t in module.variables()], count


def keras_outputs(graph: BuiltGraph, weights: list[np.ndarray], x: np.ndarray, training: bool):
    from worker.training.tf.graph import build_model

    model, variables = build_model(graph)
    for variable, value in zip(variables, weights, strict=True):
        variable.assign(value)
    y = np.asarray(model(x, training=training))
    count = sum(math.prod(v.shape) for v in model.trainable_variables)
    return y, [np.asarray(v.numpy()) for v in variables], count


def onnx_outputs(case: Case, graph: BuiltGraph, weights: list[np.ndarray], x: np.ndarray):
    spec = JobSpec.model_validate(
        {
            "framework": "pytorch",
            "dataset": {"id": "case"},
            "model": {"type": "graph", "layers": case.layers},
        },
    )
    one, zero = np.float32(1.0), np.float32(0.0)
    tokens = case.vocab is not None
    model = build_onnx(
        spec, weights, case.shape, case.outputs, np.asarray(one), np.asarray(zero), tokens
    )
    return run_onnx(model.SerializeToString(), x.astype(np.float32))


def test_every_op_has_a_case() -> None:
    covered = set().union(*(case.ops for case in CASES.values()))
    assert covered == set(OPS), f"ops without a case in op_cases.py: {set(OPS) - covered}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_both_frameworks_and_onnx_agree(name: str) -> None:
    case = CASES[name]
    graph = built(case)
    weights, x = weights_for(graph, seed=1), samples(case, seed=2)
    torch_y, _, torch_count = torch_outputs(graph, weights, x, training=False)
    keras_y, _, keras_count = keras_outputs(graph, weights, x, training=False)
    assert torch_count == keras_count == graph.parameters
    assert torch_y.shape == (BATCH, case.outputs)
    np.testing.assert_allclose(torch_y, keras_y, rtol=TOLERANCE, atol=TOLERANCE)
    onnx_y = onnx_outputs(case, graph, weights, x)
    np.testing.assert_allclose(onnx_y, torch_y, rtol=TOLERANCE, atol=TOLERANCE)
    np.testing.assert_allclose(onnx_y, keras_y, rtol=TOLERANCE, atol=TOLERANCE)


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if "train" in c.tags))
def test_training_mode_agrees_and_updates_the_same_statistics(name: str) -> None:
    case = CASES[name]
    graph = built(case)
    weights, x = weights_for(graph, seed=3), samples(case, seed=4)
    torch_y, torch_after, _ = torch_outputs(graph, weights, x, training=True)
    keras_y, keras_after, _ = keras_outputs(graph, weights, x, training=True)
    np.testing.assert_allclose(torch_y, keras_y, rtol=TOLERANCE, atol=TOLERANCE)
    for a, b in zip(torch_after, keras_after, strict=True):
        np.testing.assert_allclose(a, b, rtol=TOLERANCE, atol=TOLERANCE)


@pytest.mark.parametrize("momentum", [0.5, 0.9, 0.99])
def test_moving_statistics_keep_the_asked_share_of_their_old_value(momentum: float) -> None:
    """Keras' momentum in both frameworks: moving = momentum * old + (1 - momentum) * batch's,
    the variance the batch's biased one."""
    layers = [{"name": "bn", "op": "batch_norm", "momentum": momentum}]
    case = Case((4, 4, 3), layers)
    graph = built(case)
    weights, x = weights_for(graph, seed=5), samples(case, seed=6)
    flat = x.reshape(-1, 3).astype(np.float64)
    mean = momentum * weights[2] + (1 - momentum) * flat.mean(axis=0)
    variance = momentum * weights[3] + (1 - momentum) * flat.var(axis=0)
    for _, after, _ in (
        torch_outputs(graph, weights, x, training=True),
        keras_outputs(graph, weights, x, training=True),
    ):
        np.testing.assert_allclose(after[2], mean, rtol=TOLERANCE, atol=TOLERANCE)
        np.testing.assert_allclose(after[3], variance, rtol=TOLERANCE, atol=TOLERANCE)
