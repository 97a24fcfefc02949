"""The job spec: defaults, bounds on every number, and clear errors for what cannot work."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from app.schemas.dataset_spec import model_input
from app.schemas.job_spec import SPEC_EXAMPLE, JobSpec
from app.schemas.spec_graph import built_model, count_parameters

MINIMAL = {"framework": "pytorch", "dataset": {"name": "digits"}}


def spec(**overrides: Any) -> dict[str, Any]:
    body = copy.deepcopy(MINIMAL)
    for dotted, value in overrides.items():
        target = body
        *parents, leaf = dotted.split("__")
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = value
    return body


def graph(dense: dict[str, Any], *more: dict[str, Any]) -> dict[str, Any]:
    """A graph model: a dense node 'd' with these fields, then `more` layers."""
    layers = [{"name": "d", "op": "dense", "units": 8, **dense}, *more]
    return {"type": "graph", "layers": layers}


def error_of(body: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        JobSpec.model_validate(body)
    return str(info.value)


def test_minimal_spec_gets_documented_defaults() -> None:
    job = JobSpec.model_validate(MINIMAL)
    assert job.task == "classification"
    assert job.training.epochs == 10 and job.training.batch_size == 32 and job.training.shuffle
    assert job.optimizer.name == "adam" and job.optimizer.learning_rate == 0.001
    assert job.dataset.validation_split == 0.1 and job.model.type == "mlp"
    assert job.early_stopping is None and job.resources.replica_count == 1


def test_the_example_and_both_seeds_are_expressible() -> None:
    JobSpec.model_validate(SPEC_EXAMPLE)
    tf_seed = JobSpec.model_validate(
        {
            "framework": "tensorflow",
            "dataset": {"name": "fashion_mnist"},
            "model": {"type": "mlp", "hidden_units": [128, 64]},
            "regularization": {"l2": 0.001},
            "training": {"epochs": 5, "batch_size": 32},
            "early_stopping": {"monitor": "val_loss", "patience": 2},
        }
    )
    torch_seed = JobSpec.model_validate(
        {
            "framework": "pytorch",
            "dataset": {"name": "mnist", "normalize": "standard"},
            "model": {"type": "mlp", "hidden_units": [128]},
            "training": {"epochs": 5, "batch_size": 64},
            "lr_scheduler": {"name": "step", "step_size": 1, "gamma": 0.1},
        }
    )
    assert (
        count_parameters(tf_seed.model, (28, 28), 10)
        == 784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10
    )
    assert count_parameters(torch_seed.model, (28, 28), 10) == 784 * 128 + 128 + 128 * 10 + 10


def test_round_trips_through_json() -> None:
    job = JobSpec.model_validate(SPEC_EXAMPLE)
    assert JobSpec.model_validate_json(job.model_dump_json()) == job


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"training__epochs": 0}, "greater than or equal to 1"),
        ({"training__epochs": 1001}, "less than or equal to 1000"),
        ({"training__batch_size": 0}, "greater than or equal to 1"),
        ({"training__batch_size": 10**7}, "less than or equal to 65536"),
        ({"optimizer__learning_rate": 0}, "greater than 0"),
        ({"optimizer__learning_rate": "NaN"}, "valid number"),
        ({"training__epochs": True}, "valid integer"),
        ({"training__epochs": "10"}, "valid integer"),
        ({"optimizer__learning_rate": float("inf")}, "finite number"),
        ({"model__hidden_units": [10**6]}, "less than or equal to 8192"),
        ({"model__hidden_units": [8] * 17}, "at most 16 items"),
        ({"model__dropout": 1.0}, "less than or equal to 0.9"),
        ({"dataset__validation_split": 0.9}, "less than or equal to 0.5"),
        ({"dataset__limit": 10_000_001}, "less than or equal to 10000000"),
        ({"dataset__limit": 9}, "greater than or equal to 10"),
        ({"regularization__l2": -1}, "greater than or equal to 0"),
        ({"early_stopping": {"patience": -1}}, "greater than or equal to 0"),
        ({"tags": {f"k{i}": "v" for i in range(33)}}, "at most 32 items"),
        ({"tags": {"k": "v" * 300}}, "at most 256 characters"),
        ({"max_restarts": 11}, "less than or equal to 10"),
        (
            {"model": graph({"lr_multiplier": 0})},
            "dense.lr_multiplier\n  layer 0 'd' (dense): Input should be greater than 0",
        ),
        ({"model": graph({"lr_multiplier": 101})}, "less than or equal to 100"),
        ({"model": graph({"lr_multiplier": float("nan")})}, "finite number"),
    ],
)
def test_every_number_is_bounded(overrides: dict[str, Any], message: str) -> None:
    assert message in error_of(spec(**overrides))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"surprise": 1}, "Extra inputs are not permitted"),
        ({"optimizer__betas": [0.9, 0.99]}, "Extra inputs are not permitted"),
        ({"framework": "jax"}, "'pytorch' or 'tensorflow'"),
        ({"dataset": {"name": "../../etc/passwd"}}, "Input should be"),
        ({"dataset": {"name": "digits", "id": "abc"}}, "exactly one of dataset.name"),
        ({"dataset": {"id": "../x"}}, "String should match pattern"),
        ({"dataset": {"name": "digits", "samples": 100}}, "only apply to the synthetic"),
        ({"optimizer__momentum": 0.9}, "momentum applies to rmsprop and sgd, not adam"),
        ({"optimizer__weight_decay": 0.01}, "use regularization.l2"),
        ({"optimizer": {"name": "sgd", "nesterov": True}}, "nesterov needs"),
        ({"optimizer": {"name": "rmsprop", "nesterov": True}}, "nesterov applies to sgd, not"),
        (
            {"optimizer": {"name": "lamb"}},
            "unknown optimizer 'lamb': choose one of adam, adamw, rmsprop, sgd",
        ),
        (
            {"lr_scheduler": {"name": "one_cycle"}},
            "unknown lr_scheduler 'one_cycle': choose one of cosine, exponential, "
            "reduce_on_plateau, step",
        ),
        ({"lr_scheduler": {"gamma": 0.5}}, "lr_scheduler needs a name: one of cosine"),
        (
            {"lr_scheduler": {"name": "step", "min_lr": 0.01}},
            "min_lr applies to cosine and reduce_on_plateau, not step",
        ),
        ({"early_stopping": {"monitor": "val_f1"}}, "is not recorded for this job"),
        (
            {"early_stopping": {"monitor": "val_loss"}, "dataset__validation_split": 0},
            "is not recorded",
        ),
        ({"task": "regression"}, "task regression needs a synthetic or uploaded"),
        ({"resources": {"strategy": "mirrored", "replicas": 2}}, "mirrored is TensorFlow's"),
        (
            {"resources": {"replicas": 2}, "training__batch_size": 33},
            "must divide by the replica count",
        ),
        ({"resources": {"precision": "fp16"}}, "fp16 needs a GPU"),
        ({"checkpoint_every_steps": 100}, "checkpoint_every_steps applies to sharded data sets"),
        ({"model": {"type": "cnn", "conv_channels": [8, 8, 8, 8]}}, "shrink 8x8 images to nothing"),
        ({"model": {"type": "mlp", "hidden_units": [8192, 8192]}}, "the limit is"),
        (
            {
                "model": graph(
                    {}, {"name": "a", "op": "activation", "fn": "relu", "lr_multiplier": 2}
                )
            },
            "activation 'a': has no parameters: lr_multiplier 2 would scale nothing",
        ),
        (
            {"model": graph({"trainable": False, "lr_multiplier": 0.1})},
            "dense 'd': is frozen (trainable: false): lr_multiplier 0.1 would scale nothing",
        ),
    ],
)
def test_what_cannot_work_is_rejected_with_a_reason(
    overrides: dict[str, Any], message: str
) -> None:
    assert message in error_of(spec(**overrides))


def test_an_optimizer_spec_stored_with_every_shared_field_still_means_the_same() -> None:
    """Before the registry one model held every optimizer's fields, so stored specs carry
    them at their defaults: those are dropped, and only each optimizer's own fields remain."""
    stored = {"learning_rate": 0.01, "momentum": 0.0, "nesterov": False, "weight_decay": 0.0}
    for name, own in [
        ("adam", {}),
        ("adamw", {"weight_decay": 0.0}),
        ("sgd", {"momentum": 0.0, "nesterov": False}),
        ("rmsprop", {"momentum": 0.0}),
    ]:
        job = JobSpec.model_validate(spec(optimizer={"name": name, **stored}))
        assert job.optimizer.model_dump() == {"name": name, "learning_rate": 0.01, **own}
    assert "momentum applies to" in error_of(spec(optimizer={"momentum": False}))


def test_mode_auto_and_monitors_follow_the_task() -> None:
    regression = spec(
        task="regression", dataset={"name": "synthetic"}, early_stopping={"monitor": "val_mae"}
    )
    assert JobSpec.model_validate(regression).early_stopping is not None
    assert "is not recorded" in error_of(spec(early_stopping={"monitor": "val_mae"}))


def test_openapi_documents_the_spec_with_an_example_defaults_and_descriptions() -> None:
    from fastapi.testclient import TestClient

    from app.main import create_app

    response = TestClient(create_app()).get("/openapi.json")  # public: no key, no database
    assert response.status_code == 200
    document = response.json()
    body = document["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/JobSpec"}
    schemas = document["components"]["schemas"]
    job_spec = schemas["JobSpec"]
    assert job_spec["examples"] == [SPEC_EXAMPLE]
    JobSpec.model_validate(job_spec["examples"][0])  # the documented example is accepted
    assert job_spec["required"] == ["framework", "dataset"]
    epochs = schemas["TrainingSpec"]["properties"]["epochs"]
    assert (epochs["default"], epochs["minimum"], epochs["maximum"]) == (10, 1, 1000)
    assert epochs["description"] == "passes over the training split"
    specs = {name: schema for name, schema in schemas.items() if name.endswith("Spec")}
    assert len(specs) >= 12 and all(schema.get("description") for schema in specs.values())
    undocumented = [
        f"{name}.{field}"
        for name, schema in specs.items()
        for field, prop in schema["properties"].items()
        if not prop.get("description") and "const" not in prop  # discriminators: one value
    ]
    assert undocumented == []


def test_openapi_lists_every_op_with_its_fields_descriptions_and_bounds() -> None:
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.schemas.graph import OPS

    schemas = TestClient(create_app()).get("/openapi.json").json()["components"]["schemas"]
    layers = schemas["GraphSpec"]["properties"]["layers"]
    assert layers["maxItems"] == 256
    mapping = layers["items"]["discriminator"]["mapping"]
    assert mapping == {op: f"#/components/schemas/{cls.__name__}" for op, cls in OPS.items()}
    for op, cls in OPS.items():
        schema = schemas[cls.__name__]
        assert schema.get("description") and schema["additionalProperties"] is False, op
        assert set(schema["properties"]) == set(cls.model_fields), op
        undocumented = [
            field
            for field, prop in schema["properties"].items()
            if not prop.get("description") and "const" not in prop
        ]
        assert undocumented == [], op
    filters = schemas["Conv2D"]["properties"]["filters"]
    assert (filters["minimum"], filters["maximum"]) == (1, 1024)
    assert schemas["Dropout"]["properties"]["rate"]["maximum"] == 0.9


def test_a_spec_builds_its_model_once_and_a_copy_with_another_model_its_own() -> None:
    spec = JobSpec.model_validate({"framework": "pytorch", "dataset": {"name": "digits"}})
    x = model_input(spec, (8, 8))
    graph = built_model(spec, x, 10)
    assert built_model(spec, x, 10) is graph  # the validator's build, shared
    assert built_model(spec, x, 3) is not graph  # another head: built for it
    mlp = {"type": "mlp", "hidden_units": [7]}
    wider = JobSpec.model_validate({**spec.model_dump(mode="json"), "model": mlp})
    copied = spec.model_copy(update={"model": wider.model})
    assert built_model(copied, x, 10).parameters == built_model(wider, x, 10).parameters
    assert built_model(copied, x, 10).parameters != graph.parameters
    fresh = JobSpec.model_validate(spec.model_dump())
    assert fresh == spec  # the builds are no part of the spec's value
