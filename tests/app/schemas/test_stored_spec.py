"""The typed view of a stored spec (app.schemas.stored_spec) names JobSpec's fields with
JobSpec's types: a renamed or retyped field fails here rather than on a stored row."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_type_hints, is_typeddict

import pytest
import yaml
from pydantic import BaseModel, TypeAdapter

from app.schemas.job_spec import SPEC_EXAMPLE, JobSpec
from app.schemas.stored_spec import Shown, StoredSpec, shown
from tests.helpers import ROOT

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation of JobSpec can hold (a union's members too)."""
    found = [annotation] if isinstance(annotation, type) else []
    found += [m for arg in get_args(annotation) for m in _models(arg)]
    return [m for m in found if issubclass(m, BaseModel)]


def _views(annotation: Any) -> list[Any]:
    """The TypedDicts an annotation of the view can hold."""
    args = get_args(annotation) or (annotation,)
    return [a for a in args if is_typeddict(a)]


def _check_names(view: Any, model: type[BaseModel], where: str) -> None:
    for name, annotation in get_type_hints(view).items():
        assert name in model.model_fields, f"{where}{name} is no field of {model.__name__}"
        for inner in _views(annotation):
            models = _models(model.model_fields[name].annotation)
            assert models, f"{where}{name} holds no model in {model.__name__}"
            for each in models:
                _check_names(inner, each, f"{where}{name}.")


def test_every_key_of_the_view_is_a_field_of_the_spec() -> None:
    _check_names(StoredSpec, JobSpec, "")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_a_stored_spec_has_the_views_keys_with_its_types(path: Path) -> None:
    stored = JobSpec.model_validate(yaml.safe_load(path.read_text())).model_dump(mode="json")
    TypeAdapter(StoredSpec).validate_python(stored, strict=True)
    assert set(shown(stored)) == set(get_type_hints(Shown))


def test_what_a_job_shows_of_its_spec() -> None:
    spec = JobSpec.model_validate(SPEC_EXAMPLE).model_dump(mode="json")
    assert shown(spec) == {
        "epochs": 10,
        "tags": {"team": "vision"},
        "best_metric_name": "val_loss",
    }
    bare = JobSpec.model_validate(
        {"framework": "pytorch", "dataset": {"name": "digits", "validation_split": 0}}
    )
    assert shown(bare.model_dump(mode="json"))["best_metric_name"] == "train_loss"
