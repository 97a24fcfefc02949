"""One name, one place: the metrics row's fields and the id shape, as every layer takes them."""

from __future__ import annotations

import uuid

import pytest

from app.domain.tables import EpochMetric
from app.schemas.api import MetricRow
from app.schemas.dataset_spec import DatasetSpec
from app.schemas.ids import ID_CHARS, ID_MAX_LENGTH, is_id
from app.schemas.metric_row import METRIC_FIELDS, ROW_FIELDS, monitored
from app.schemas.sweep import OBJECTIVE_FIELDS


def test_the_table_and_the_api_row_have_the_metric_rows_fields() -> None:
    columns = [c.name for c in EpochMetric.__table__.columns]
    assert [c for c in columns if c not in ("job_id", "attempt", "recorded_at")] == [
        "epoch",
        *METRIC_FIELDS,
    ]
    assert all(EpochMetric.__table__.c[name].nullable for name in METRIC_FIELDS)
    assert tuple(MetricRow.model_fields) == ROW_FIELDS
    assert set(OBJECTIVE_FIELDS) < set(METRIC_FIELDS)


def test_a_monitor_names_a_training_score_bare_and_watches_its_field() -> None:
    assert monitored("loss") == "train_loss" and monitored("accuracy") == "train_accuracy"
    assert monitored("val_loss") == "val_loss" and monitored("train_mae") == "train_mae"


def test_the_job_specs_dataset_id_has_the_id_shape() -> None:
    # job_spec.py spells it out (its model specs are being rewritten apart); this holds it equal.
    metadata = DatasetSpec.model_fields["id"].metadata
    assert ID_MAX_LENGTH in [getattr(m, "max_length", None) for m in metadata]
    assert ID_CHARS in [getattr(m, "pattern", None) for m in metadata]


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (str(uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF)), True),  # fixed: xdist ids
        ("a" * ID_MAX_LENGTH, True),
        ("a" * (ID_MAX_LENGTH + 1), False),
        ("", False),
        ("abc\n", False),  # matched whole: `$` alone would let a trailing newline through
        ("../etc", False),
        ("a\x00b", False),
        (42, False),
    ],
)
def test_the_id_shape(value: object, ok: bool) -> None:
    assert is_id(value) is ok
