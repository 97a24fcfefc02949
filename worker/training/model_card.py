"""What a succeeded job leaves for use elsewhere: the evaluation report, model.onnx (checked
against the framework; its metadata names the job's parent) and model-card.json, all beside
the framework's own model file.

The parity check feeds ONNX Runtime raw rows (the held-out split as stored, or denormalized
when it is held in memory) and the framework the same rows as evaluation prepares them
(normalized, and through dataset.augment's deterministic steps); both run in float32 from the
float32 weights, also for bf16 and fp16 jobs (whose master weights are float32), so the check
measures the export, not rounding.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.domain.job_files import CARD_FILE, ONNX_FILE
from app.schemas.augment import Step, eval_steps
from app.schemas.dataset_spec import class_labels
from app.schemas.job_spec import JobSpec
from worker.training.backend import Backend
from worker.training.data import Splits
from worker.training.data.streamed import REPORT_ROWS
from worker.training.evaluation import evaluation_report
from worker.training.onnx_export import INPUT, OPSET, build_onnx, output_name, run_onnx
from worker.training.warm_start import lineage

CARD_VERSION = 1
PARITY_ROWS = 256
# Largest |onnx - framework| allowed, per unit of output magnitude above 1 (large logits and
# regression targets carry proportionally larger float32 rounding).
PARITY_TOLERANCE = 1e-4


class ExportError(Exception):
    """model.onnx does not compute what the framework computes; the message says by how much."""


def held_out(splits: Splits) -> tuple[str, np.ndarray, np.ndarray]:
    """The split the final result reports on: test, else validation, else training (of a
    streamed data set: its first REPORT_ROWS rows)."""
    if splits.stream is not None:
        for name in ("test", "val"):
            if name in splits.stream.parts:
                return (name, *splits.stream.head(name, REPORT_ROWS))
    for name, x, y in (
        ("test", splits.x_test, splits.y_test),
        ("val", splits.x_val, splits.y_val),
    ):
        if x is not None and y is not None:
            return name, x, y
    return "train", splits.x_train, splits.y_train


def labels(spec: JobSpec, splits: Splits) -> list[Any]:
    """Each class's label, by index: the names a sharded data set's index keeps (an image
    folder's folders), else the built-in set's names, else the index."""
    names = splits.stream.class_names if splits.stream is not None else None
    if names is not None and len(names) == splits.outputs:
        return list(names)
    return class_labels(spec, splits.outputs)


def evaluate(spec: JobSpec, backend: Backend, splits: Splits) -> dict[str, Any]:
    """The evaluation report on the held-out split, from the back-end's outputs."""
    split, x, y = held_out(splits)
    report = evaluation_report(spec.task, backend.predict(x), y, split, splits.outputs)
    if spec.task == "classification":  # what the dashboard and `epochal show` label them by
        report["classes"] = labels(spec, splits)
    return report


def preprocess(spec: JobSpec, splits: Splits) -> list[Step]:
    """dataset.augment's steps that model.onnx repeats on its raw rows (eval_steps)."""
    return eval_steps(spec.dataset.augment, splits.raw_shape)


def parity_rows(splits: Splits) -> tuple[np.ndarray, np.ndarray]:
    """Up to PARITY_ROWS held-out rows twice: raw, as a user feeds model.onnx, and as the
    framework reads them."""
    stream = splits.stream
    if stream is not None:
        name = next((n for n in ("test", "val") if n in stream.parts), "train")
        raw, _ = stream.raw_head(name, PARITY_ROWS)
        return raw.astype(np.float32), stream.held_out(raw)
    _, x, _ = held_out(splits)
    batch = x[:PARITY_ROWS]
    return (batch * splits.scale + splits.shift).astype(np.float32), batch


def export_onnx(spec: JobSpec, backend: Backend, splits: Splits, directory: Path) -> dict[str, Any]:
    """Write directory/model.onnx once it matches the framework on up to PARITY_ROWS rows."""
    started = time.perf_counter()
    model = build_onnx(
        spec,
        backend.get_weights(),
        splits.raw_shape,
        splits.outputs,
        splits.scale,
        splits.shift,
        splits.tokens,
        lineage=lineage(spec),
        steps=preprocess(spec, splits),
    )
    data = model.SerializeToString()
    raw, batch = parity_rows(splits)
    expected = backend.predict(batch)
    got = run_onnx(data, raw)
    diff = float(np.max(np.abs(got - expected)))
    limit = PARITY_TOLERANCE * max(1.0, float(np.max(np.abs(expected))))
    if not diff <= limit:  # NaN fails too
        raise ExportError(
            f"ONNX export parity exceeded: model.onnx differs from the {spec.framework} model by "
            f"up to {diff:.3g} (allowed {limit:.3g}) on {len(batch)} held-out rows"
        )
    _write(directory / ONNX_FILE, data)
    return {
        "max_abs_diff": diff,
        "rows": len(batch),
        "opset": OPSET,
        "bytes": len(data),
        "seconds": round(time.perf_counter() - started, 4),
    }


def _listed(value: np.ndarray) -> float | list[Any]:
    array = np.asarray(value, dtype=np.float32)
    return float(array) if array.ndim == 0 else array.tolist()


def model_card(
    spec: JobSpec, splits: Splits, job_id: str, result: dict[str, Any], onnx: dict[str, Any]
) -> dict[str, Any]:
    """The card beside model.onnx: how to feed it, what comes out, and where it came from;
    its metrics are the result's plain values (the report and timings stay in the result)."""
    metrics = {k: v for k, v in result.items() if not isinstance(v, dict | list)}
    classify = spec.task == "classification"
    return {
        "format_version": CARD_VERSION,
        "job_id": job_id,
        "framework": spec.framework,
        "task": spec.task,
        "input": {
            "name": INPUT,
            "dtype": "float32",
            "shape": [None, *splits.raw_shape],
            # a model over token ids: its inputs are whole numbers below vocab
            **({"vocab": splits.vocab} if splits.tokens else {}),
        },
        # what model.onnx does to its input after the normalization, before the network
        "preprocess": [step.model_dump(mode="json") for step in preprocess(spec, splits)],
        "output": {"name": output_name(spec.task), "shape": [None, splits.outputs]},
        "normalization": {
            "kind": spec.dataset.normalize,
            "scale": _listed(splits.scale),
            "shift": _listed(splits.shift),
        },
        "classes": labels(spec, splits) if classify else None,
        "spec": spec.model_dump(mode="json"),
        "dataset": {
            "name": spec.dataset.name,
            "id": spec.dataset.id,
            "sha256": splits.fingerprint,
        },
        "metrics": metrics,
        "lineage": result.get("lineage"),  # the job its first weights came from, if any
        "parity": {"max_abs_diff": onnx["max_abs_diff"], "rows": onnx["rows"]},
    }


def write_card(directory: Path, card: dict[str, Any]) -> None:
    _write(directory / CARD_FILE, json.dumps(card, indent=2).encode())


def _write(path: Path, data: bytes) -> None:
    """Whole or not at all: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
