"""Admission by cost: a job whose estimated memory or disk exceeds what any worker has is a 422.

The limits are EPOCHAL_MAX_JOB_MEMORY_BYTES and what the largest live worker able to take the
job advertises in its heartbeat (memory, free artifacts disk); with no live worker reporting,
this machine's memory stands in (the embedded default runs both on one machine).

An upload's row is read for the caller only (its owner, or an admin), as the data-set check
reads it, and each row once per request: a sweep's edges share the reads (`Lookups`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.domain.cost import (
    Cost,
    DataShape,
    builtin_data,
    estimate,
    gigabytes,
    graph_of,
    host_memory_bytes,
    itemsize_of,
    memory_fields,
)
from app.domain.datasets import get_visible
from app.domain.keys import Caller
from app.domain.spec_paths import apply_params
from app.domain.stream_memory import held_bytes
from app.domain.sweep_space import combinations, space_edges
from app.domain.tables import Dataset, Worker, utcnow
from app.schemas.graph import BuiltGraph, GraphError
from app.schemas.job_spec import JobSpec
from app.schemas.sweep import SweepSpec


class Lookups:
    """The rows admission reads for one caller, each read once: a sweep checks up to a
    thousand specs, which share a few data sets and GPU counts."""

    def __init__(self, session: Session, key: Caller | None) -> None:
        self.session, self.key = session, key
        self._data: dict[str, DataShape | None] = {}
        self._capacity: dict[int, tuple[int | None, int | None]] = {}
        self._limit: dict[int | None, tuple[int | None, str]] = {}

    def data(self, spec: JobSpec) -> DataShape | None:
        """What the job loads, from the spec or its upload's row (None: no upload this key
        may use)."""
        known = builtin_data(spec)
        dataset_id = spec.dataset.id
        if known is not None or dataset_id is None:
            return known
        if dataset_id not in self._data:
            row = (  # no key: a job of no owner, stored by the service itself
                self.session.get(Dataset, dataset_id)
                if self.key is None
                else get_visible(self.session, dataset_id, self.key)
            )
            self._data[dataset_id] = None if row is None else _shape_of(row)
        return _as_held(self._data[dataset_id], spec)

    def capacity(self, gpus: int) -> tuple[int | None, int | None]:
        if gpus not in self._capacity:
            self._capacity[gpus] = worker_capacity(self.session, gpus)
        return self._capacity[gpus]

    def limit(self, worker_memory: int | None) -> tuple[int | None, str]:
        """memory_limit, read once (it reads this machine's cgroup files)."""
        if worker_memory not in self._limit:
            self._limit[worker_memory] = memory_limit(worker_memory)
        return self._limit[worker_memory]


def _shape_of(row: Dataset) -> DataShape:
    outputs = row.classes or 1
    shape = tuple(int(n) for n in row.shape)
    itemsize = itemsize_of(row.dtype)
    # A sharded data set streams: held_bytes is set per spec (_as_held); 0 marks it until then.
    held = 0 if row.storage == "shards" else None
    return DataShape(row.samples, row.test_samples or 0, shape, itemsize, outputs, row.vocab, held)


def _as_held(data: DataShape | None, spec: JobSpec) -> DataShape | None:
    """A sharded data set's shape with what this spec's process holds of it."""
    if data is None or data.held_bytes is None:
        return data
    values = math.prod(data.sample_shape)
    held = held_bytes(get_settings(), spec.dataset.stream_ram_mb, values, data.itemsize)
    return replace(data, held_bytes=held)


def data_of(session: Session, spec: JobSpec, key: Caller | None) -> DataShape | None:
    """What the job loads, from the spec or its upload's row (None: no upload `key` may use)."""
    return Lookups(session, key).data(spec)


@dataclass(frozen=True)
class Admitted:
    """One admission of a job spec: its data, its model built once for that data, the cost
    estimated from it, and the field errors when it does not fit (the data and what follows
    are None while the upload is unknown; graph and cost when the model does not fit it)."""

    data: DataShape | None
    graph: BuiltGraph | None
    cost: Cost | None
    errors: list[Any]

    @property
    def summary(self) -> dict[str, Any] | None:
        """The built model as the job resource shows it (parameters, FLOPs per sample, each
        layer's output shape and parameters, head included)."""
        return None if self.graph is None else self.graph.summary()

    @property
    def memory_bytes(self) -> int | None:
        return None if self.cost is None else self.cost.memory_bytes

    @property
    def disk_bytes(self) -> int | None:
        """The job's checkpoints and model, reserved in its key's storage quota until it ran."""
        return None if self.cost is None else self.cost.disk_bytes


def admit(
    session: Session, spec: JobSpec, key: Caller | None, lookups: Lookups | None = None
) -> Admitted:
    """The job's admission: its graph built once, its cost, and why it cannot be admitted on
    cost (field errors, [] when it fits or while its upload is unknown: the data-set check
    answers for that, as it does for a model that does not fit its upload)."""
    lookups = lookups or Lookups(session, key)
    data = lookups.data(spec)
    if data is None:
        return Admitted(None, None, None, [])
    try:
        graph = graph_of(spec, data)
    except GraphError as exc:  # the submit checks refuse such a job first
        return Admitted(data, None, None, [_error("model", f"model: {exc}")])
    cost = estimate(spec, data, graph)
    capacity = lookups.capacity(spec.resources.gpus)
    errors = cost_errors(spec, cost, capacity, lookups.limit(capacity[0]))
    return Admitted(data, graph, cost, errors)


def worker_capacity(session: Session, gpus: int) -> tuple[int | None, int | None]:
    """Largest memory and free disk among live workers with at least `gpus` GPUs."""
    horizon = utcnow() - timedelta(seconds=3 * get_settings().heartbeat_seconds)
    query = select(func.max(Worker.memory_bytes), func.max(Worker.disk_free_bytes)).where(
        Worker.heartbeat_at >= horizon, Worker.gpus >= gpus
    )
    memory, disk = session.execute(query).one()
    return memory, disk


def memory_limit(worker_memory: int | None) -> tuple[int | None, str]:
    """The memory bound a job must fit in, and where it comes from (for the message)."""
    setting = get_settings().max_job_memory_bytes
    if setting is not None and (worker_memory is None or setting <= worker_memory):
        return setting, "EPOCHAL_MAX_JOB_MEMORY_BYTES"
    if worker_memory is not None:
        return worker_memory, "the largest live worker's memory"
    return host_memory_bytes(), "this machine's memory (no live worker reports its own)"


def cost_errors(
    spec: JobSpec,
    cost: Cost,
    capacity: tuple[int | None, int | None],
    bound: tuple[int | None, str] | None = None,
) -> list[Any]:
    """Field errors (RequestValidationError's shape) when the job cannot fit; [] when it can
    (`bound`: memory_limit of the capacity, when the caller has it)."""
    worker_memory, worker_disk = capacity
    limit, source = bound or memory_limit(worker_memory)
    errors: list[dict[str, Any]] = []
    if limit is not None and cost.memory_bytes > limit:
        msg = (
            f"the job needs an estimated {gigabytes(cost.memory_bytes)} "
            f"({cost.memory_bytes} bytes) of host memory at its peak; the limit is "
            f"{gigabytes(limit)} ({limit} bytes, {source}); most of it is the "
            f"{cost.largest_part()}"
        )
        errors += [_error(field, msg) for field in memory_fields(spec, cost)]
    if worker_disk is not None and cost.disk_bytes > worker_disk:
        msg = (
            f"the job's checkpoints and model need an estimated {gigabytes(cost.disk_bytes)} "
            f"({cost.disk_bytes} bytes) of disk; the largest live worker has "
            f"{gigabytes(worker_disk)} ({worker_disk} bytes) free"
        )
        errors.append(_error("model", msg))
    return errors


def disk_estimate(session: Session, spec: JobSpec, key: Caller) -> int | None:
    """The job's checkpoints and model, estimated (None while its upload is missing)."""
    return admit(session, spec, key).disk_bytes


def admission_errors(
    session: Session,
    spec: JobSpec,
    key: Caller | None,
    where: str = "",
    lookups: Lookups | None = None,
) -> list[Any]:
    """Why this job cannot be admitted on cost, as field errors ([] when it fits), under
    `where` (a sweep's `base`)."""
    return located(admit(session, spec, key, lookups).errors, where)


def located(errors: list[Any], where: str) -> list[Any]:
    """Field errors moved under `where` (none: as they are)."""
    if not where:
        return errors
    return [{**e, "loc": ("body", *where.split("."), *e["loc"][1:])} for e in errors]


def sweep_admission_errors(session: Session, sweep: SweepSpec, key: Caller) -> list[Any]:
    """The base must fit, and so must each parameter's ends, each alone on the base and then
    together (as space_errors checks them: a trial of the largest batch and the widest layer
    fits only if both do at once): at most MAX_EDGE_VALUES + MAX_COMBINATIONS specs, sharing
    one read of each row."""
    lookups = Lookups(session, key)
    errors = admission_errors(session, sweep.base, key, "base", lookups)
    edges = space_edges(sweep.parameters)
    if errors or edges is None:  # None: space_errors refused the space already
        return errors
    base = sweep.base.model_dump(mode="json")
    for path, values in edges.items():
        for value in values:
            if found := _trial_errors(session, key, lookups, apply_params(base, {path: value})):
                msg = f"the value {json.dumps(value)[:80]} makes a job that does not fit: "
                return [_error(f"parameters.{path}", msg + found)]
    for params in combinations(edges):
        if found := _trial_errors(session, key, lookups, apply_params(base, params)):
            together = ", ".join(f"{p}={json.dumps(v)[:80]}" for p, v in params.items())
            msg = f"together ({together}) they make a job that does not fit: {found}"
            return [_error(f"parameters.{p}", msg) for p in params]
    return []


def _trial_errors(
    session: Session, key: Caller, lookups: Lookups, body: dict[str, Any]
) -> str | None:
    """Why the job of this body does not fit (its first reason), or None when it does."""
    trial = JobSpec.model_validate_json(json.dumps(body))
    found = admission_errors(session, trial, key, lookups=lookups)
    return str(found[0]["msg"]) if found else None


def _error(field: str, msg: str) -> dict[str, Any]:
    return {"loc": ("body", *field.split(".")), "msg": msg, "type": "value_error"}
