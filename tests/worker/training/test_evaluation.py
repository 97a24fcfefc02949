"""The evaluation report's numbers, checked against counts worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from worker.training.evaluation import evaluation_report


def one_hot(labels: list[int], classes: int) -> np.ndarray:
    """Logits whose argmax is each label."""
    return np.eye(classes, dtype=np.float32)[labels]


def test_classification_report_from_a_known_confusion() -> None:
    y = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])
    pred = [0, 1, 1, 1, 0, 2, 2, 1, 2, 1]  # class 3 is never predicted right
    report = evaluation_report("classification", one_hot(pred, 4), y, "test", classes=4)
    assert report["split"] == "test" and report["samples"] == 10
    assert report["confusion_matrix"] == [[1, 2, 0, 0], [1, 1, 0, 0], [0, 1, 3, 0], [0, 1, 0, 0]]
    assert report["accuracy"] == pytest.approx(0.5)
    rows = report["per_class"]
    assert [r["support"] for r in rows] == [3, 2, 4, 1]
    precision, recall = [r["precision"] for r in rows[:3]], [r["recall"] for r in rows]
    assert precision == pytest.approx([1 / 2, 1 / 5, 1.0])
    assert recall == pytest.approx([1 / 3, 1 / 2, 3 / 4, 0.0])
    assert rows[0]["f1"] == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))
    # never predicted: precision is undefined (null), recall and F1 are 0
    assert rows[3]["precision"] is None and rows[3]["recall"] == 0.0 and rows[3]["f1"] == 0.0
    top = report["top_confusions"]
    assert top[0] == {"true": 0, "predicted": 1, "count": 2}
    assert {(t["true"], t["predicted"]) for t in top[1:]} == {(1, 0), (2, 1), (3, 1)}
    assert all(t["count"] == 1 for t in top[1:]) and len(top) == 4  # only real mistakes


def test_top_confusions_are_at_most_five_largest_first() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 2000)
    pred = np.where(rng.random(2000) < 0.5, y, rng.integers(0, 10, 2000))
    report = evaluation_report("classification", one_hot(list(pred), 10), y, "val", classes=10)
    top = report["top_confusions"]
    assert len(top) == 5
    assert [t["count"] for t in top] == sorted((t["count"] for t in top), reverse=True)
    off = np.array(report["confusion_matrix"])
    np.fill_diagonal(off, 0)
    assert top[0]["count"] == off.max() and sum(map(sum, report["confusion_matrix"])) == 2000


def test_regression_report() -> None:
    y = np.arange(100, dtype=np.float32)
    values = (y + np.where(np.arange(100) % 2 == 0, 1.0, -3.0))[:, None]  # residuals +1 / -3
    report = evaluation_report("regression", values.astype(np.float32), y, "test", classes=1)
    assert report["samples"] == 100
    assert report["mae"] == pytest.approx(2.0)
    assert report["rmse"] == pytest.approx(np.sqrt(5.0))
    assert report["r2"] == pytest.approx(1 - 500 / float(np.sum((y - y.mean()) ** 2)))
    q = report["residual_quantiles"]
    assert list(q) == ["5", "25", "50", "75", "95"]
    assert q["5"] == pytest.approx(-3.0) and q["95"] == pytest.approx(1.0)


def test_a_constant_target_has_no_r2() -> None:
    report = evaluation_report("regression", np.ones((5, 1)), np.ones(5), "val", classes=1)
    assert report["r2"] is None and report["mae"] == 0.0
