"""A sweep's search space against the job schema: the values it can take at its edges, and
whether every spec the space can produce is valid (where a value goes: app.domain.spec_paths).

A range is checked at both ends (and every categorical choice, every value of a short int
range), alone and in combination with the other parameters' edges, by building the spec and
validating it exactly as POST /v1/jobs would. The errors name the parameter (422 at submit).

Every check is bounded before it runs (RELIABILITY.md §10b): a grid's size is computed from
its ranges, never by listing them; at most MAX_EDGE_VALUES specs are checked one parameter at
a time (a space with more is a 422), and at most MAX_COMBINATIONS combinations (every one when
there are no more, else a fixed sample).

`priority` and `preemptible` are not parameters: they are what a key's caps limit, and a
trial's priority is the sweep's own `priority` field, checked against the cap at submit.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from app.domain.spec_paths import PathError, apply_params, path_exists, set_path
from app.schemas.job_spec import JobSpec, monitor_names
from app.schemas.metric_row import monitored
from app.schemas.sweep import (
    CategoricalDist,
    Distribution,
    IntDist,
    SweepSpec,
)

ENUMERATE_INTS = 64  # an int range this short is checked at every value
# Specs validated one parameter at a time, over all parameters (each a whole spec's
# validation): a space with more edge values is refused; its short int ranges are then checked
# at their ends only.
MAX_EDGE_VALUES = 1024
MAX_COMBINATIONS = 512  # beyond this a fixed sample of this many combinations is checked
GRID_LIMIT = 100_000


def edge_values(dist: Distribution, enumerate_ints: bool = True) -> list[Any]:
    """The values a range must be valid at: its ends (every value when short, unless not
    `enumerate_ints`), every choice."""
    if isinstance(dist, CategoricalDist):
        return list(dist.choices)
    if isinstance(dist, IntDist):
        values = range(dist.low, dist.top + 1, dist.step)
        short = enumerate_ints and len(values) <= ENUMERATE_INTS
        return list(values) if short else sorted({dist.low, dist.top})
    return [dist.low, dist.high] if dist.low != dist.high else [dist.low]


def space_edges(space: Mapping[str, Distribution]) -> dict[str, list[Any]] | None:
    """Each parameter's edge values, at most MAX_EDGE_VALUES in all (short int ranges fall
    back to their ends first); None when even that is too many."""
    for enumerate_ints in (True, False):
        edges = {p: edge_values(d, enumerate_ints) for p, d in space.items()}
        if sum(len(v) for v in edges.values()) <= MAX_EDGE_VALUES:
            return edges
    return None


def grid_count(dist: Distribution) -> int | None:
    """How many values a finite range has (computed, never listed), None for a continuous one."""
    if isinstance(dist, CategoricalDist):
        return len(dist.choices)
    if isinstance(dist, IntDist) and not dist.log:
        return (dist.top - dist.low) // dist.step + 1
    return None


def grid_values(dist: Distribution) -> list[Any] | None:
    """Every value of a finite range (grid sampling; only for a grid checked to be within
    GRID_LIMIT points), or None for a continuous one."""
    if isinstance(dist, CategoricalDist):
        return list(dist.choices)
    if isinstance(dist, IntDist) and not dist.log:
        return list(range(dist.low, dist.top + 1, dist.step))
    return None


def _error(path: str, msg: str, where: str = "parameters") -> dict[str, Any]:
    return {"loc": ("body", where, path), "msg": msg, "type": "value_error"}


def rejection(spec: dict[str, Any]) -> str | None:
    """What the job schema says about this spec (as POST /v1/jobs would), or None if valid."""
    try:
        JobSpec.model_validate_json(json.dumps(spec))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        return f"{where}: {msg}" if where else msg
    return None


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _invalid(base: dict[str, Any], params: Mapping[str, Any]) -> str | None:
    """Why the spec these values make is not a job, or None when it is one."""
    try:
        return rejection(apply_params(base, params))
    except PathError as exc:  # a parent's value (a whole graph) lacks the indexed entry
        return str(exc)


def _path_errors(base: dict[str, Any], space: Mapping[str, Distribution]) -> list[dict[str, Any]]:
    """Each path that indexes an entry the base spec does not have (a node past its last)."""
    errors = []
    for path in space:
        try:
            set_path(base, path, None)
        except PathError as exc:
            errors.append(_error(path, str(exc)))
    return errors


def _each_alone(base: dict[str, Any], edges: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    errors = []
    for path, values in edges.items():
        for value in values:
            why = _invalid(base, {path: value})
            if why is not None:
                errors.append(
                    _error(path, f"the value {_shown(value)} makes an invalid job: {why}")
                )
                break
    return errors


def combinations(edges: Mapping[str, list[Any]]) -> Iterator[dict[str, Any]]:
    """The edge values of two or more parameters together: every combination when there are
    at most MAX_COMBINATIONS, else that many of them (both corners, then a fixed sample), so
    the check stays bounded. A trial is admitted as a whole at launch as well
    (app.services.trial_limits), so a combination the sample misses fails only its trial."""
    paths = sorted(edges)
    if len(paths) < 2:
        return
    lists = [edges[p] for p in paths]
    if _product_size([len(v) for v in lists]) <= MAX_COMBINATIONS:
        for values in itertools.product(*lists):
            yield dict(zip(paths, values, strict=True))
        return
    draw = random.Random(len(paths))  # the same sample for the same space, every time
    yield dict(zip(paths, [v[0] for v in lists], strict=True))
    yield dict(zip(paths, [v[-1] for v in lists], strict=True))
    for _ in range(MAX_COMBINATIONS - 2):
        yield dict(zip(paths, [draw.choice(v) for v in lists], strict=True))


def _combined(base: dict[str, Any], edges: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    paths = sorted(edges)
    for params in combinations(edges):
        why = _invalid(base, params)
        if why is not None:
            together = ", ".join(f"{p}={_shown(v)}" for p, v in params.items())
            return [
                _error(p, f"together ({together}) they make an invalid job: {why}") for p in paths
            ]
    return []


def _product_size(sizes: list[int], cap: int = GRID_LIMIT) -> int:
    """The product of `sizes`, or cap + 1 once it passes `cap` (it can be astronomically big)."""
    size = 1
    for n in sizes:
        size *= n
        if size > cap:
            return cap + 1
    return size


def _objective_errors(sweep: SweepSpec) -> list[dict[str, Any]]:
    metric = sweep.objective.metric
    recorded = {monitored(m) for m in monitor_names(sweep.base)}  # as metrics-row fields
    if metric not in recorded:
        msg = f"{metric} is not recorded for the base job; choose one of {sorted(recorded)}"
        return [_error("metric", msg, "objective")]
    return []


def _grid_errors(sweep: SweepSpec) -> list[dict[str, Any]]:
    if sweep.sampler.name != "grid":
        return []
    sizes = []
    for path, dist in sweep.parameters.items():
        count = grid_count(dist)
        if count is None:
            return [_error(path, "grid sampling needs categorical or int (not log) ranges")]
        sizes.append(count)
    if _product_size(sizes) > GRID_LIMIT:
        return [_error("name", f"the grid has more than {GRID_LIMIT} points", "sampler")]
    return []


UNSWEEPABLE = {
    "priority": "priority is not a sweep parameter: set the sweep's own priority field "
    "(within the key's cap); every trial runs at it",
    "preemptible": "preemptible is not a sweep parameter: set it in the base (false: admin "
    "keys only)",
}


def space_errors(sweep: SweepSpec) -> list[dict[str, Any]]:
    """Every way the sweep's space can make a job the schema rejects (empty: it is sound)."""
    unknown = [p for p in sweep.parameters if not path_exists(p)]
    if unknown:
        return [_error(p, f"{p} is not a field of the job spec") for p in unknown]
    if capped := [p for p in sweep.parameters if p in UNSWEEPABLE]:
        return [_error(p, UNSWEEPABLE[p]) for p in capped]
    errors = _grid_errors(sweep)  # first: it costs nothing, and bounds what grid_values lists
    edges = space_edges(sweep.parameters)
    if edges is None:
        msg = (
            f"the space has more than {MAX_EDGE_VALUES} values to check at its edges (every "
            "categorical choice, each end of every range): use fewer choices or parameters"
        )
        return errors + [_error(p, msg) for p in sweep.parameters]
    base = sweep.base.model_dump(mode="json")
    if missing := _path_errors(base, sweep.parameters):
        return missing
    errors = _each_alone(base, edges) + _objective_errors(sweep) + errors
    return errors or _combined(base, edges)


def grid_size(sweep: SweepSpec) -> int | None:
    """How many points a grid sweep has, computed (None for other samplers)."""
    if sweep.sampler.name != "grid":
        return None
    return _product_size([grid_count(d) or 0 for d in sweep.parameters.values()])
