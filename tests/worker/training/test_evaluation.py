"""The evaluation report's numbers, checked against counts worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from worker.training.evaluation import accuracy_gap_warnings, evaluation_report


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


def report_at(accuracy: float, shares: list[float], split: str = "test") -> dict:
    """A report on 1,000 samples with these class shares, right on the first `accuracy` of
    them (every mistake predicts the next class)."""
    counts = [round(1000 * share) for share in shares]
    y = np.repeat(np.arange(len(shares)), counts)
    right = np.arange(len(y)) < round(accuracy * len(y))
    pred = np.where(right, y, (y + 1) % len(shares))
    return evaluation_report("classification", one_hot(list(pred), len(shares)), y, split, 10)


TEN = [0.1] * 10


@pytest.mark.parametrize(
    ("held_out", "train", "warned"),
    [
        (0.10, 0.82, True),  # at chance after learning, as an unsettled batch norm gave
        (0.40, 0.82, True),  # kept under half its margin over chance (0.30 of 0.72)
        (0.50, 0.82, False),  # kept more than half (0.40 of 0.72)
        (0.80, 0.82, False),
        (0.10, 0.30, False),  # training itself barely above chance: nothing learned to lose
        (0.10, None, False),  # no training accuracy to compare with
    ],
)
def test_a_held_out_accuracy_far_below_training_warns(
    held_out: float, train: float | None, warned: bool
) -> None:
    warnings = accuracy_gap_warnings(report_at(held_out, TEN), train)
    assert bool(warnings) == warned
    if warned:
        assert warnings[0].startswith(f"test accuracy {held_out:.3f} is far below the training")
        assert "chance: 0.100" in warnings[0] and "batch_norm momentum" in warnings[0]


def test_chance_is_the_largest_class_and_only_held_out_classification_warns() -> None:
    skewed = [0.9, 0.1]  # always guessing the first class scores 0.9: that is chance here
    assert accuracy_gap_warnings(report_at(0.9, skewed), 0.99)
    assert not accuracy_gap_warnings(report_at(0.97, skewed), 0.99)
    assert accuracy_gap_warnings(report_at(0.1, TEN, "val"), 0.9)[0].startswith("validation")
    assert not accuracy_gap_warnings(report_at(0.1, TEN, "train"), 0.9)
    y = np.arange(10, dtype=np.float32)
    assert not accuracy_gap_warnings(evaluation_report("regression", y, y, "test", 1), 0.9)
