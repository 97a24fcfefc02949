"""What a succeeded job leaves: the evaluation report, model.onnx and its card, in both frameworks.

Real training and real ONNX Runtime: the exported graph is fed RAW rows (pixels 0..255, digits
0..16), rebuilt here from the data set itself, and must reproduce the job's reported accuracy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from app.domain.job_files import CARD_FILE, ONNX_FILE, JobFiles
from app.schemas.dataset_spec import class_labels
from app.schemas.job_spec import JobSpec
from tests.worker.training.inprocess import EMPTY_DATA_DIR, backend_for, make_spec, run_spec
from worker.training.data import load_raw, load_splits
from worker.training.model_card import ExportError, evaluate, export_onnx
from worker.training.onnx_export import build_onnx, run_onnx

pytestmark = [pytest.mark.torch, pytest.mark.tf]
FRAMEWORKS = ["pytorch", "tensorflow"]
CASES: dict[str, dict[str, Any]] = {
    "digits-mlp": {
        "dataset": {"name": "digits"},
        "model": {"hidden_units": [32], "batch_norm": True, "activation": "gelu", "dropout": 0.1},
        "training": {"epochs": 2},
    },
    "fashion-cnn": {
        "dataset": {"name": "fashion_mnist", "limit": 600},
        "model": {
            "type": "cnn",
            "conv_channels": [4, 6],
            "kernel_size": 4,  # even: 'same' pads the odd pixel after
            "dense_units": [16],
            "dropout": 0.2,
        },
        "training": {"epochs": 2},
    },
}


def raw_held_out(spec: JobSpec) -> tuple[np.ndarray, np.ndarray]:
    """The held-out rows as the data set stores them (not normalized): the test split, else
    the validation rows the job's seed drew."""
    raw, ds = load_raw(spec, EMPTY_DATA_DIR), spec.dataset
    if raw.x_test is not None and raw.y_test is not None:
        return raw.x_test[: ds.limit], raw.y_test[: ds.limit]
    x, y = raw.x[: ds.limit], raw.y[: ds.limit]
    order = np.random.default_rng(spec.training.seed).permutation(len(x))
    rows = np.sort(order[: int(round(len(x) * ds.validation_split))])
    return x[rows], y[rows]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    """Each case trained once in each framework: (case, framework) -> (spec, model dir, result)."""
    out = {}
    for case, fields in CASES.items():
        for framework in FRAMEWORKS:
            spec = make_spec(framework, **fields)
            workdir = tmp_path_factory.mktemp(f"{case}-{framework}")
            run = run_spec(spec, workdir)
            assert run.outcome.status == "succeeded", run.outcome.error
            out[case, framework] = spec, JobFiles(workdir).model_dir, run.outcome.result
    return out


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", CASES)
def test_onnx_on_raw_inputs_reproduces_the_reported_accuracy(
    trained: dict[tuple[str, str], Any], case: str, framework: str
) -> None:
    spec, model_dir, result = trained[case, framework]
    split = result["evaluated_on"]
    x_raw, y = raw_held_out(spec)
    report = result["evaluation"]
    assert report["split"] == split and report["samples"] == len(y)
    assert sum(map(sum, report["confusion_matrix"])) == len(y)
    assert report["accuracy"] == result[f"{split}_accuracy"]
    logits = run_onnx((model_dir / ONNX_FILE).read_bytes(), x_raw.astype(np.float32))
    assert float(np.mean(np.argmax(logits, axis=1) == y)) == result[f"{split}_accuracy"]
    export = result["export"]["onnx"]
    assert 0 <= export["max_abs_diff"] <= 1e-4 and export["opset"] == 17
    assert export["bytes"] == (model_dir / ONNX_FILE).stat().st_size
    card = json.loads((model_dir / CARD_FILE).read_text())
    assert card["input"] == {"name": "input", "dtype": "float32", "shape": [None, *x_raw.shape[1:]]}
    assert card["output"] == {"name": "logits", "shape": [None, 10]}
    assert card["framework"] == framework and card["classes"] == class_labels(spec, 10)
    assert report["classes"] == card["classes"]  # the report labels its classes as the card
    if spec.dataset.name == "fashion_mnist":
        assert card["classes"][9] == "Ankle boot"
    assert card["normalization"]["kind"] == "unit"
    assert card["normalization"]["scale"] == (16.0 if case == "digits-mlp" else 255.0)
    assert card["metrics"][f"{split}_accuracy"] == result[f"{split}_accuracy"]
    assert card["parity"] == {"max_abs_diff": export["max_abs_diff"], "rows": min(256, len(y))}
    assert len(card["dataset"]["sha256"]) == 64


@pytest.mark.parametrize("case", CASES)
def test_both_frameworks_export_the_same_graph(
    trained: dict[tuple[str, str], Any], case: str
) -> None:
    graphs = [onnx.load(str(trained[case, f][1] / ONNX_FILE)).graph for f in FRAMEWORKS]
    ops = [[node.op_type for node in graph.node] for graph in graphs]
    assert ops[0] == ops[1] and ops[0][:2] == ["Sub", "Div"]
    shapes = [[tuple(t.dims) for t in graph.initializer] for graph in graphs]
    assert shapes[0] == shapes[1]
    cards = [json.loads((trained[case, f][1] / CARD_FILE).read_text()) for f in FRAMEWORKS]
    assert cards[0]["dataset"] == cards[1]["dataset"]  # the same data, by checksum


def random_weights(like: list[np.ndarray], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(0.0, 0.3, size=w.shape).astype(np.float32) for w in like]


SAME_WEIGHTS = {
    "mlp-sigmoid-bn": {"hidden_units": [24, 12], "activation": "sigmoid", "batch_norm": True},
    "cnn-avg-k5": {"type": "cnn", "conv_channels": [3, 5], "kernel_size": 5, "pool": "avg"},
    "cnn-nopool-gelu": {
        "type": "cnn",
        "conv_channels": [2],
        "pool": "none",
        "activation": "gelu",
        "dense_units": [8],
    },
}


@pytest.mark.parametrize("model", SAME_WEIGHTS.values(), ids=SAME_WEIGHTS.keys())
def test_the_same_weights_give_the_same_report_and_graph(model: dict[str, Any]) -> None:
    """From the same weights both back-ends report the same confusion matrix, and the same
    model.onnx bytes come out, matching each framework's own outputs."""
    reports, graphs = {}, {}
    for framework in FRAMEWORKS:
        spec = make_spec(framework, model=model, dataset={"name": "digits", "limit": 400})
        splits = load_splits(spec, EMPTY_DATA_DIR)
        with backend_for(spec) as backend:
            backend.set_weights(random_weights(backend.get_weights(), seed=5))
            reports[framework] = evaluate(spec, backend, splits)
            weights = backend.get_weights()
            graph = build_onnx(spec, weights, splits.input_shape, 10, splits.scale, splits.shift)
            graphs[framework] = graph.SerializeToString()
            raw = splits.x_val * splits.scale + splits.shift  # type: ignore[operator]
            got = run_onnx(graphs[framework], raw.astype(np.float32))
            np.testing.assert_allclose(got, backend.predict(splits.x_val), atol=1e-4)  # type: ignore[arg-type]
    a, b = reports["pytorch"], reports["tensorflow"]
    assert a["confusion_matrix"] == b["confusion_matrix"] and a["samples"] == 40
    assert a["per_class"] == b["per_class"] and a["top_confusions"] == b["top_confusions"]
    assert graphs["pytorch"] == graphs["tensorflow"]


def test_a_regression_job_reports_mae_rmse_r2(tmp_path: Path) -> None:
    spec = make_spec(
        "pytorch",
        task="regression",
        dataset={"name": "synthetic", "samples": 500, "features": 8, "normalize": "standard"},
        model={"hidden_units": [16]},
        training={"epochs": 3},
    )
    run = run_spec(spec, tmp_path)
    assert run.outcome.status == "succeeded", run.outcome.error
    result = run.outcome.result
    report = result["evaluation"]
    assert report["split"] == "test" and report["samples"] == 100
    assert report["mae"] == pytest.approx(result["test_mae"], rel=1e-5)
    assert report["rmse"] >= report["mae"] > 0 and report["r2"] is not None
    assert list(report["residual_quantiles"]) == ["5", "25", "50", "75", "95"]
    card = json.loads(JobFiles(tmp_path).model_card.read_text())
    assert card["output"] == {"name": "values", "shape": [None, 1]} and card["classes"] is None
    assert len(card["normalization"]["scale"]) == 8  # standard: one per feature
    x_raw, y = raw_held_out(spec)
    values = run_onnx(JobFiles(tmp_path).onnx.read_bytes(), x_raw)
    assert float(np.mean(np.abs(values[:, 0] - y))) == pytest.approx(report["mae"], rel=1e-5)


class Tampered:
    """A back-end whose weights, as handed to the exporter, are not the ones it computes with."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def get_weights(self) -> list[np.ndarray]:
        weights = self.backend.get_weights()
        weights[0] = weights[0] + 0.01
        return weights

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.backend.predict(x))


def test_an_export_that_differs_from_the_framework_fails_loudly(tmp_path: Path) -> None:
    spec = make_spec("pytorch", dataset={"name": "digits", "limit": 300})
    splits = load_splits(spec, EMPTY_DATA_DIR)
    with backend_for(spec) as backend:
        exported = export_onnx(spec, backend, splits, tmp_path)
        assert exported["max_abs_diff"] <= 1e-4 and (tmp_path / ONNX_FILE).exists()
        (tmp_path / ONNX_FILE).unlink()
        with pytest.raises(ExportError, match="parity exceeded"):
            export_onnx(spec, Tampered(backend), splits, tmp_path)  # type: ignore[arg-type]
    assert not (tmp_path / ONNX_FILE).exists()
