"""THE sweep spec (v1): a base job spec, a search space over its fields, objective, sampler,
pruner and budget; and the sweep as the API shows it. Pure Pydantic, like the job spec.

Whether every spec the space can produce is one the job schema accepts is checked against the
base spec in app.domain.sweep_space (it needs the values substituted, not just these shapes).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.schemas.job_spec import JobSpec
from app.schemas.metric_row import SCORES, SPLITS, score_field
from app.schemas.priority import PRIORITY_MAX, PRIORITY_MIN

# The metrics-row fields an objective may name (the per-epoch scores a pruner compares),
# validation ones first.
OBJECTIVE_FIELDS = tuple(
    score_field(split, score) for split in reversed(SPLITS) for score in SCORES
)
# Dotted field names; a number is a list index (model.layers.3.filters: the fourth node's).
PARAMETER_PATH = r"^[a-z_][a-z0-9_]*(\.([a-z_][a-z0-9_]*|[0-9]{1,3}))*$"
MAX_PARAMETERS = 32
# How deeply a categorical choice may nest: a whole scheduler or a list of widths is 2 or 3
# levels; copying and encoding a deeper one recursed past Python's limit (a 500).
MAX_CHOICE_DEPTH = 16


class _Sweep(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class UniformDist(_Sweep):
    """A float drawn evenly from [low, high]."""

    type: Literal["uniform"]
    low: float = Field(allow_inf_nan=False)
    high: float = Field(allow_inf_nan=False)

    @model_validator(mode="after")
    def _ordered(self) -> UniformDist:
        if self.low > self.high:
            raise ValueError("low must not exceed high")
        return self


class LogUniformDist(UniformDist):
    """A float drawn evenly in log space from [low, high]; low > 0."""

    type: Literal["loguniform"]  # type: ignore[assignment]

    @model_validator(mode="after")
    def _positive(self) -> LogUniformDist:
        if self.low <= 0:
            raise ValueError("loguniform needs low > 0")
        return self


class IntDist(_Sweep):
    """An integer from low, low + step, … up to high; `log` draws in log space (step 1)."""

    type: Literal["int"]
    low: int = Field(ge=-(2**31), le=2**31)
    high: int = Field(ge=-(2**31), le=2**31)
    step: int = Field(1, ge=1, le=2**31)
    log: bool = False

    @model_validator(mode="after")
    def _valid(self) -> IntDist:
        if self.low > self.high:
            raise ValueError("low must not exceed high")
        if self.log and (self.step != 1 or self.low < 1):
            raise ValueError("log needs step 1 and low >= 1")
        return self

    @property
    def top(self) -> int:
        """The largest value the range reaches (high, rounded down to the step grid)."""
        return self.low + (self.high - self.low) // self.step * self.step


class CategoricalDist(_Sweep):
    """One of `choices`: any JSON values (a list of widths or a whole scheduler is one choice)."""

    type: Literal["categorical"]
    choices: list[Any] = Field(min_length=1, max_length=256)

    @field_validator("choices")
    @classmethod
    def _shallow(cls, choices: list[Any]) -> list[Any]:
        for number, choice in enumerate(choices):
            if _nests_deeper(choice, MAX_CHOICE_DEPTH):
                raise ValueError(f"choice {number} nests deeper than {MAX_CHOICE_DEPTH} levels")
        return choices


def _nests_deeper(value: Any, limit: int) -> bool:
    """Whether a JSON value nests more than `limit` lists or objects deep (walked without
    recursion, so a deep one cannot overflow the stack here either)."""
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth >= limit:
                return True
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return False


Distribution = Annotated[
    UniformDist | LogUniformDist | IntDist | CategoricalDist, Field(discriminator="type")
]


class ObjectiveSpec(_Sweep):
    """The metrics-row field to optimize and its direction (auto: max for accuracy-like)."""

    metric: Literal[OBJECTIVE_FIELDS] = Field(  # type: ignore[valid-type]
        "val_loss", description="the metrics-row field a trial is judged by"
    )
    mode: Literal["min", "max", "auto"] = Field(
        "auto", description="min | max; auto: max for accuracies, else min"
    )

    @property
    def direction(self) -> Literal["min", "max"]:
        if self.mode != "auto":
            return self.mode
        return "max" if "acc" in self.metric else "min"


class SamplerSpec(_Sweep):
    """Optuna's sampler: tpe (default), random, or grid (every parameter finite)."""

    name: Literal["tpe", "random", "grid"] = Field("tpe", description="how trials are drawn")
    seed: int | None = Field(None, ge=0, le=2**31 - 1, description="reproducible draws")
    n_startup_trials: int = Field(10, ge=0, le=1000, description="tpe: random trials first")


# The parameters each pruner takes, with their bounds; anything else is refused.
PRUNER_PARAMS: dict[str, dict[str, tuple[int, int]]] = {
    "none": {},
    "median": {
        "n_startup_trials": (0, 1000),
        "interval_steps": (1, 1000),
        "n_min_trials": (1, 1000),
    },
    "successive_halving": {"reduction_factor": (2, 100), "min_early_stopping_rate": (0, 100)},
    "hyperband": {"reduction_factor": (2, 100)},
}


class PrunerSpec(_Sweep):
    """Optuna's pruner; no trial is pruned before it has trained `min_epochs` epochs."""

    name: Literal["none", "median", "successive_halving", "hyperband"] = Field(
        "median", description="which rule stops a trial that falls behind"
    )
    params: dict[str, int] = Field(
        default_factory=dict, max_length=8, description="the pruner's own integer parameters"
    )
    min_epochs: int = Field(1, ge=1, le=1000, description="epochs every trial trains at least")

    @model_validator(mode="after")
    def _known_params(self) -> PrunerSpec:
        allowed = PRUNER_PARAMS[self.name]
        for key, value in self.params.items():
            if key not in allowed:
                raise ValueError(
                    f"pruner {self.name} takes {sorted(allowed) or 'no params'}, not {key!r}"
                )
            low, high = allowed[key]
            if not low <= value <= high:
                raise ValueError(f"pruner.params.{key} must be within [{low}, {high}]")
        return self


class SweepSpec(_Sweep):
    """A sweep: trials are jobs made from `base` with `parameters` drawn by the sampler."""

    name: str = Field(
        "sweep", min_length=1, max_length=100, pattern=r"^[\w.\- ]+$", description="a label"
    )
    base: JobSpec = Field(description="a full job spec; each trial overrides its parameters")
    parameters: dict[
        Annotated[str, Field(min_length=1, max_length=128, pattern=PARAMETER_PATH)], Distribution
    ] = Field(
        min_length=1,
        max_length=MAX_PARAMETERS,
        description="dotted spec path -> range; a number indexes a list (model.layers.3.filters)",
    )
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec, description="what is optimized")
    sampler: SamplerSpec = Field(default_factory=SamplerSpec, description="how trials are drawn")
    pruner: PrunerSpec = Field(default_factory=PrunerSpec, description="when a trial is stopped")
    max_trials: int = Field(20, ge=1, le=1000, description="trials launched in all")
    max_parallel: int = Field(2, ge=1, le=64, description="trials queued or running at once")
    max_failed_trials: int = Field(
        3, ge=0, le=1000, description="failed trials tolerated; one more ends the sweep failed"
    )
    priority: int | None = Field(
        None,
        ge=PRIORITY_MIN,
        le=PRIORITY_MAX,
        description="every trial's priority (default: the base's)",
    )


class TrialPublic(BaseModel):
    """One trial: its job, the values drawn, how it went."""

    number: int
    job_id: str
    params: dict[str, Any]
    state: str = Field(description="queued | running | complete | pruned | failed | cancelled")
    status: str = Field(description="the job's status")
    stop_reason: str | None
    objective: float | None = Field(description="the best value of the objective over its epochs")
    epochs_run: int
    epochs: int


class BestTrial(BaseModel):
    number: int
    job_id: str
    params: dict[str, Any]
    objective: float
    model: str = Field(description="where the trial's exported model downloads from")


class SweepSummary(BaseModel):
    id: str
    name: str
    status: str = Field(description="running | succeeded | failed | cancelled")
    created_at: datetime
    finished_at: datetime | None
    trials_launched: int
    max_trials: int
    objective: ObjectiveSpec
    best_objective: float | None = Field(
        None, description="the objective of the best complete trial so far (none yet: null)"
    )
    wait_reason: str | None = Field(
        None, description="why no trial is queued now though one may be: the key's limits"
    )
    error: str | None = Field(
        None, description="why the sweep failed: too many failed trials, or it could not go on"
    )


class SweepPublic(SweepSummary):
    """A sweep with every trial, the best one, and what the pruner saved."""

    spec: dict[str, Any]
    trials: list[TrialPublic]
    counts: dict[str, int] = Field(description="trials per state")
    best: BestTrial | None
    epochs_spent: int = Field(description="epochs trained over all trials")
    epochs_full: int = Field(description="what every launched trial at full length would cost")


class SweepsPublic(BaseModel):
    items: list[SweepSummary]
    next_cursor: str | None = Field(None, description="pass as ?cursor= for the next page")
