"""THE job spec (v1): the one contract between the API, the database and the worker.

Pure Pydantic and the standard library, so the worker and the training child can import it
without the web layer. Every number is bounded, unknown fields are rejected, and a field the
engine cannot honour is rejected here with a message that says so, never silently ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from app.schemas.augment import augmented_shape
from app.schemas.dataset_spec import DatasetSpec, input_shape_and_classes, model_input
from app.schemas.graph import MLPSpec
from app.schemas.monitor import Mode
from app.schemas.optimizers import DEFAULT as DEFAULT_OPTIMIZER
from app.schemas.optimizers import OPTIMIZERS, OptimizerSpec
from app.schemas.priority import PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN
from app.schemas.schedules import LRSchedulerSpec
from app.schemas.spec_graph import Builds, ModelSpec, check_model_for_data
from app.schemas.strict import StrictModel
from app.schemas.warm_start import ContinuesField, InitSpec

Framework = Literal["pytorch", "tensorflow"]
FRAMEWORKS: tuple[str, ...] = get_args(Framework)  # the back-ends, for code outside the spec
Task = Literal["classification", "regression"]
MAX_NODES = 16  # workers one job may span (a gang)


class TrainingSpec(StrictModel):
    """How long and in what batches; batch_size is the global batch over all replicas."""

    epochs: int = Field(10, ge=1, le=1000, description="passes over the training split")
    batch_size: int = Field(32, ge=1, le=65536, description="the global batch, over all replicas")
    seed: int = Field(
        42,
        ge=0,
        le=2**31 - 1,
        description="weights, validation split, sample order and dropout all follow it",
    )
    shuffle: bool = Field(True, description="Reshuffle the samples (not batches) every epoch.")


class RegularizationSpec(StrictModel):
    """An explicit loss term l2 * sum(w**2) over kernel weights (not biases), both frameworks."""

    l2: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="weight of l2 * sum(w**2) over kernels, added to the loss",
    )


class EarlyStoppingSpec(StrictModel):
    """Keras' EarlyStopping: stop after `patience` epochs without a min_delta improvement."""

    monitor: str = Field(
        "val_loss", max_length=32, description="the metric watched, e.g. val_loss or val_accuracy"
    )
    mode: Mode = Field("auto", description="min, max, or auto (max for accuracy-like names)")
    patience: int = Field(
        2, ge=0, le=1000, description="epochs without improvement before stopping"
    )
    min_delta: float = Field(
        0.0, ge=0.0, le=1e6, description="smallest change that counts as improvement"
    )
    restore_best_weights: bool = Field(False, description="end with the best epoch's weights")
    baseline: float | None = Field(
        None, allow_inf_nan=False, description="the wait only resets once the monitor beats this"
    )
    start_from_epoch: int = Field(0, ge=0, le=1000, description="epochs of warm-up not watched")


class ResourcesSpec(StrictModel):
    """Devices: gpus the worker must own, replicas (data parallel), strategy, precision and
    CPU threads."""

    gpus: int = Field(0, ge=0, le=64, description="GPUs the worker must own; 0 trains on CPU")
    replicas: int | None = Field(None, ge=1, le=64, description="default max(gpus, 1)")
    nodes: int = Field(
        1,
        ge=1,
        le=MAX_NODES,
        description="workers the job runs on at once (a gang), each with gpus and replicas; "
        "> 1: on CPU only, for now (TensorFlow: one replica per node)",
    )
    strategy: Literal["auto", "single", "mirrored", "ddp"] = Field(
        "auto", description="auto: mirrored (TensorFlow) or ddp (PyTorch) when replicas > 1"
    )
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="mixed precision; fp16 needs a GPU"
    )
    cpu_threads: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="CPU threads to train on, split among DDP ranks; default and ceiling: "
        "the worker's EPOCHAL_WORKER_CPUS",
    )

    @property
    def replica_count(self) -> int:
        """Replicas on each node."""
        return self.replicas or max(self.gpus, 1)

    @property
    def world_size(self) -> int:
        """Replicas over all nodes: the global batch is split over these."""
        return self.nodes * self.replica_count


SPEC_EXAMPLE: dict[str, Any] = {
    "name": "fashion-dnn-l2",
    "framework": "tensorflow",
    "task": "classification",
    "dataset": {"name": "fashion_mnist", "validation_split": 0.1},
    "model": {"type": "mlp", "hidden_units": [128, 64], "activation": "relu"},
    "training": {"epochs": 10, "batch_size": 32, "seed": 42},
    "optimizer": {"name": "adam", "learning_rate": 0.001},
    "regularization": {"l2": 0.001},
    "early_stopping": {"monitor": "val_loss", "patience": 2, "restore_best_weights": True},
    "tags": {"team": "vision"},
}


class JobSpec(StrictModel):
    """A training job: data, model and recipe; the same meaning in both frameworks."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, json_schema_extra={"examples": [SPEC_EXAMPLE]}
    )

    name: str = Field(
        "job",
        min_length=1,
        max_length=128,
        pattern=r"^[\w.\- ]+$",
        description="a label for people",
    )
    framework: Framework = Field(description="which back-end trains the model")
    task: Task = Field(
        "classification",
        description="classification: cross-entropy, accuracy; regression: MSE, MAE",
    )
    dataset: DatasetSpec = Field(description="the data, its split and normalization")
    model: ModelSpec = Field(
        default_factory=MLPSpec,
        description="graph (named layers), or the mlp or cnn template; type defaults to mlp",
    )
    training: TrainingSpec = Field(
        default_factory=TrainingSpec, description="epochs, batch, seed, shuffling"
    )
    optimizer: OptimizerSpec = Field(
        default_factory=OPTIMIZERS[DEFAULT_OPTIMIZER],
        description=f"optimizer and base learning rate; name defaults to {DEFAULT_OPTIMIZER}",
    )
    regularization: RegularizationSpec = Field(
        default_factory=RegularizationSpec, description="an explicit L2 loss term"
    )
    lr_scheduler: LRSchedulerSpec | None = Field(
        None, description="how the rate changes from epoch to epoch"
    )
    early_stopping: EarlyStoppingSpec | None = Field(
        None, description="Keras' EarlyStopping rule; null trains all epochs"
    )
    init: InitSpec | None = Field(
        None, description="start from a succeeded job's weights (warm start); null: fresh"
    )
    continues: str | None = ContinuesField
    resources: ResourcesSpec = Field(
        default_factory=ResourcesSpec, description="devices and replicas"
    )
    checkpoint_every_epochs: int = Field(
        1, ge=1, le=1000, description="a restarted attempt resumes from the last checkpoint"
    )
    checkpoint_every_steps: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="a sharded data set: also checkpoint every N optimizer steps, mid-epoch; "
        "a resumed attempt continues at the next sample",
    )
    max_runtime_seconds: int = Field(
        86_400,
        ge=1,
        le=30 * 86_400,
        description="from the first start, over all attempts: then stop (timeout)",
    )
    max_queue_seconds: int | None = Field(
        None, ge=1, le=30 * 86_400, description="fail (queue_timeout) if not started within this"
    )
    max_restarts: int = Field(
        2, ge=0, le=10, description="new attempts after a lost worker or infrastructure error"
    )
    priority: int = Field(
        PRIORITY_DEFAULT,
        ge=PRIORITY_MIN,
        le=PRIORITY_MAX,
        description="a free worker runs the highest-priority queued job first (a key may be "
        "capped)",
    )
    preemptible: bool = Field(
        True,
        description="may a higher-priority job stop it at an epoch and re-queue it (false: "
        "admin keys only)",
    )
    tags: dict[
        Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[\w.\-/]+$")],
        Annotated[str, Field(max_length=256)],
    ] = Field(default_factory=dict, max_length=32, description="free-form labels")
    _builds: Builds = PrivateAttr(default_factory=lambda: Builds())

    @field_validator("tags")
    @classmethod
    def _tags_are_plain(cls, tags: dict[str, str]) -> dict[str, str]:
        return dict(sorted(tags.items()))

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        _check_task_and_data(self)
        _check_monitors(self)
        _check_resources(self)
        _check_model_fits(self)
        return self


def _check_task_and_data(spec: JobSpec) -> None:
    ds = spec.dataset
    if spec.task == "regression" and ds.name not in (None, "synthetic"):
        raise ValueError(f"task regression needs a synthetic or uploaded data set, not {ds.name}")
    if spec.task == "regression" and ds.classes:
        raise ValueError("dataset.classes does not apply to task regression")
    if spec.checkpoint_every_steps is not None and ds.name is not None:
        raise ValueError(
            "checkpoint_every_steps applies to sharded data sets (dataset.id); a built-in data "
            "set checkpoints at epoch ends (checkpoint_every_epochs)"
        )


def monitor_names(spec: JobSpec) -> set[str]:
    """The metric names a monitor may watch for this spec."""
    metric = "accuracy" if spec.task == "classification" else "mae"
    train = {"loss", metric}
    if spec.dataset.validation_split > 0:
        return train | {f"val_{m}" for m in train}
    return train


def _check_monitors(spec: JobSpec) -> None:
    allowed = monitor_names(spec)
    watchers = [("early_stopping", spec.early_stopping), ("lr_scheduler", spec.lr_scheduler)]
    for field, watcher in watchers:
        monitor = getattr(watcher, "monitor", None)
        if monitor is not None and monitor not in allowed:
            raise ValueError(
                f"{field}.monitor {monitor!r} is not recorded for this job; "
                f"choose one of {sorted(allowed)}"
            )


def _check_resources(spec: JobSpec) -> None:
    res = spec.resources
    replicas = res.replica_count
    if res.gpus and replicas != res.gpus:
        raise ValueError("with gpus > 0, replicas must equal gpus (one replica per GPU)")
    if res.strategy == "single" and replicas > 1:
        raise ValueError("strategy single runs one replica; set replicas to 1 or pick a strategy")
    if res.strategy == "mirrored" and spec.framework != "tensorflow":
        raise ValueError("strategy mirrored is TensorFlow's; PyTorch uses ddp")
    if res.strategy == "ddp" and spec.framework != "pytorch":
        raise ValueError("strategy ddp is PyTorch's; TensorFlow uses mirrored")
    _check_nodes(spec)
    if spec.training.batch_size % res.world_size:
        raise ValueError(
            f"training.batch_size {spec.training.batch_size} (the global batch) must divide "
            f"by the replica count {res.world_size} (nodes × replicas)"
        )
    if res.precision == "fp16" and res.gpus == 0:
        raise ValueError("precision fp16 needs a GPU; on CPU use fp32 or bf16")


def _check_nodes(spec: JobSpec) -> None:
    """What a gang cannot run yet is refused at the door, not at the workers."""
    res = spec.resources
    if res.nodes == 1:
        return
    if res.gpus:
        raise ValueError(
            "resources.nodes > 1 with gpus > 0 is not supported yet (NCCL across workers is "
            "untested); multi-node jobs train on CPU (gpus 0, gloo)"
        )
    if res.strategy == "single":
        raise ValueError(
            "strategy single runs one replica; a multi-node job uses ddp (PyTorch) or mirrored "
            "(TensorFlow)"
        )
    if spec.framework == "tensorflow" and res.replica_count > 1:
        raise ValueError(
            "resources.replicas > 1 with resources.nodes > 1 is not supported for TensorFlow "
            "(MultiWorkerMirroredStrategy has one CPU replica per worker); use replicas 1 "
            "and more nodes"
        )


def _check_model_fits(spec: JobSpec) -> None:
    """A model that does not fit its built-in data is an error at `model` (naming the node)."""
    known = input_shape_and_classes(spec)
    if known is None:
        return
    shape, classes = known
    shape = augmented_shape(spec.dataset.augment, shape)  # what the model is given
    try:
        check_model_for_data(spec, model_input(spec, shape), classes)
    except ValueError as exc:
        message = str(exc).removeprefix("model: ")
        error = PydanticCustomError("value_error", "{message}", {"message": message})
        details = [InitErrorDetails(type=error, loc=("model",), input=None)]
        raise ValidationError.from_exception_data("JobSpec", details) from None
