"""The evaluation report of a finished job, in numpy alone: where the model is right and wrong.

Both back-ends hand over their outputs (logits or values) for a split; everything else happens
here once, so a PyTorch and a TensorFlow job with the same weights report the same numbers.
Undefined ratios (a class never predicted, a constant target) are reported as null, not NaN:
the report goes into the job's JSON result.
"""

from __future__ import annotations

from typing import Any

import numpy as np

TOP_CONFUSIONS = 5
RESIDUAL_QUANTILES = (5, 25, 50, 75, 95)
# An accuracy's margin is how far it is above chance (the held-out split's largest class
# share), as a share of the way from chance to 1. A job that learned (a training margin of at
# least LEARNED) yet kept less than KEPT of that margin on held-out data did not generalize, or
# infers unlike it trains (batch-norm statistics that had too few steps to settle): its result
# says so, rather than succeed quietly with a model at chance.
LEARNED, KEPT = 0.25, 0.5


def _ratio(numerator: float, denominator: float) -> float | None:
    return float(numerator / denominator) if denominator else None


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, classes: int) -> np.ndarray:
    """[true, predicted] counts over `classes` classes."""
    flat = y_true.astype(np.int64) * classes + y_pred.astype(np.int64)
    return np.bincount(flat, minlength=classes * classes).reshape(classes, classes)


def per_class(matrix: np.ndarray) -> list[dict[str, Any]]:
    """Precision, recall, F1 and support of each class, from the confusion matrix."""
    rows = []
    for k in range(len(matrix)):
        hits, predicted, support = int(matrix[k, k]), int(matrix[:, k].sum()), int(matrix[k].sum())
        rows.append(
            {
                "class": k,
                "precision": _ratio(hits, predicted),
                "recall": _ratio(hits, support),
                "f1": _ratio(2 * hits, predicted + support),  # 2TP / (2TP + FP + FN)
                "support": support,
            }
        )
    return rows


def top_confusions(matrix: np.ndarray, top: int = TOP_CONFUSIONS) -> list[dict[str, int]]:
    """The most frequent (true, predicted) mistakes, largest first; ties in class order."""
    off = matrix.copy()
    np.fill_diagonal(off, 0)
    order = np.argsort(-off, axis=None, kind="stable")[:top]
    pairs = [np.unravel_index(i, off.shape) for i in order]
    return [
        {"true": int(t), "predicted": int(p), "count": int(off[t, p])}
        for t, p in pairs
        if off[t, p] > 0
    ]


def classification_report(logits: np.ndarray, y: np.ndarray, classes: int) -> dict[str, Any]:
    """Accuracy, per-class table, confusion matrix [true][predicted] and top confusions."""
    matrix = confusion_matrix(y, np.argmax(logits, axis=1), classes)
    table = per_class(matrix)
    f1s = [row["f1"] for row in table if row["f1"] is not None]
    return {
        "samples": int(matrix.sum()),
        "accuracy": float(np.trace(matrix) / matrix.sum()),
        "macro_f1": float(np.mean(f1s)) if f1s else None,
        "per_class": table,
        "confusion_matrix": matrix.tolist(),
        "top_confusions": top_confusions(matrix),
    }


def regression_report(values: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """MAE, RMSE, R² and the quantiles of the residuals (prediction - target)."""
    pred = values.reshape(len(y), -1)[:, 0].astype(np.float64)
    target = y.astype(np.float64)
    residual = pred - target
    total = float(np.sum(np.square(target - target.mean())))
    r2 = 1.0 - float(np.sum(np.square(residual))) / total if total > 0 else None
    quantiles = np.percentile(residual, RESIDUAL_QUANTILES)
    return {
        "samples": len(target),
        "mae": float(np.mean(np.abs(residual))),
        "rmse": float(np.sqrt(np.mean(np.square(residual)))),
        "r2": r2,
        "residual_quantiles": {
            str(q): float(v) for q, v in zip(RESIDUAL_QUANTILES, quantiles, strict=True)
        },
    }


def evaluation_report(
    task: str, outputs: np.ndarray, y: np.ndarray, split: str, classes: int
) -> dict[str, Any]:
    """The report for `split` ("test", "val" or "train") from the model's outputs on it."""
    body = (
        classification_report(outputs, y, classes)
        if task == "classification"
        else regression_report(outputs, y)
    )
    return {"split": split, "task": task, **body}


def _margin(accuracy: float, chance: float) -> float:
    return (accuracy - chance) / (1.0 - chance) if chance < 1.0 else 0.0


def accuracy_gap_warnings(report: dict[str, Any], train_accuracy: float | None) -> list[str]:
    """A warning when the held-out accuracy of a classification report is far below the
    training accuracy (LEARNED, KEPT above); none for regression or a report on training data."""
    if report["task"] != "classification" or report["split"] == "train" or not report["samples"]:
        return []
    if train_accuracy is None:
        return []
    chance = max(row["support"] for row in report["per_class"]) / report["samples"]
    held_out, learned = _margin(report["accuracy"], chance), _margin(train_accuracy, chance)
    if learned < LEARNED or held_out >= KEPT * learned:
        return []
    split = "test" if report["split"] == "test" else "validation"
    return [
        f"{split} accuracy {report['accuracy']:.3f} is far below the training accuracy "
        f"{train_accuracy:.3f} (chance: {chance:.3f}): the model does not carry what it learned "
        "to held-out data. Overfitting, held-out data unlike the training data, or batch-norm "
        "moving statistics that had too few steps to settle (a lower batch_norm momentum "
        "settles sooner) can each cause this"
    ]
