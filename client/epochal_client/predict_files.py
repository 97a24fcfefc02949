"""`epochal predict`'s input files and output table.

.json and .csv need nothing beyond the standard library; .npy and .npz (array `x`, as for an
upload) need numpy, and are read without pickle.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.table import Table

from epochal_client.render import fmt
from epochal_client.types import Predictions

SUFFIXES = (".npy", ".npz", ".csv", ".json")


def read_rows(path: Path) -> Any:
    """The rows in a file: a numpy array (.npy, .npz with x) or nested lists (.csv, .json)."""
    suffix = path.suffix.lower()
    if suffix in (".npy", ".npz"):
        try:
            import numpy as np
        except ImportError:
            raise ValueError(f"reading {suffix} files needs numpy (pip install numpy)") from None
        loaded = np.load(path, allow_pickle=False)
        if suffix == ".npy":
            return loaded
        with loaded:
            if "x" not in loaded.files:
                raise ValueError(f"{path} has no array x (it has {', '.join(loaded.files)})")
            return loaded["x"]
    if suffix == ".csv":
        return _csv_rows(path)
    if suffix == ".json":
        document = json.loads(path.read_text())
        rows = document.get("inputs") if isinstance(document, dict) else document
        if not isinstance(rows, list):
            raise ValueError(f'{path} must hold a list of rows or {{"inputs": [...]}}')
        return rows
    raise ValueError(f"{path}: use one of {', '.join(SUFFIXES)}")


def _csv_rows(path: Path) -> list[list[float]]:
    """Numeric rows; a first line that is not all numbers is taken as a header."""
    with path.open(newline="") as f:
        lines = [line for line in csv.reader(f) if line]
    rows = []
    for number, line in enumerate(lines):
        try:
            rows.append([float(cell) for cell in line])
        except ValueError:
            if number == 0:
                continue
            raise ValueError(f"{path} line {number + 1} is not all numbers") from None
    return rows


def batches(rows: Any, size: int) -> Iterator[Any]:
    """Slices of at most `size` rows (lists and arrays alike), in order."""
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def merge(parts: list[Predictions]) -> Predictions:
    """The answers of several batches as one."""
    predictions = [p for part in parts for p in part.predictions]
    if all(part.probabilities is not None for part in parts) and parts:
        probabilities = [row for part in parts for row in part.probabilities or []]
        return Predictions(predictions, probabilities)
    return Predictions(predictions)


def predictions_table(answer: Predictions) -> Table:
    """Row, prediction and, for classification, the probability of the predicted class."""
    if answer.probabilities is None:
        table = Table("row", "prediction", box=None)
        for i, value in enumerate(answer.predictions):
            table.add_row(str(i), fmt(value))
        return table
    table = Table("row", "prediction", "probability", box=None)
    for i, (label, probabilities) in enumerate(
        zip(answer.predictions, answer.probabilities, strict=True)
    ):
        table.add_row(str(i), str(label), f"{max(probabilities):.4f}")
    return table
