"""Warm start in the worker: a job's weights kept by node, and another job started from them;
and a job that continues another from its last checkpoint.

Both back-ends hold their variables in one layout and order (Keras', node by node: the one
worker.training.init draws and model.onnx reads), so a succeeded job's weights are saved once
in that layout, keyed "node/variable", and a new job of either framework loads the nodes its
stored spec lists (app.domain.warm_start chose and checked them at submit).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from app.domain.job_files import WEIGHTS_FILE, JobFiles, latest_pointer
from app.schemas.dataset_spec import model_input
from app.schemas.graph import BuiltGraph
from app.schemas.job_spec import JobSpec
from app.schemas.spec_graph import built_model
from worker.training.backend import Backend
from worker.training.checkpoint import latest_checkpoint
from worker.training.data import Splits


class WarmStartError(Exception):
    """The source job's weights cannot be loaded here; the message says which and why."""


def graph_for(spec: JobSpec, splits: Splits) -> BuiltGraph:
    """The job's graph as its back-end built it (for its variables' names and order)."""
    x = model_input(spec, splits.input_shape, splits.tokens, splits.vocab)
    return built_model(spec, x, splits.outputs)


def keys(graph: BuiltGraph) -> list[tuple[str, str]]:
    """(node, variable) of every variable, in the back-ends' order."""
    return [(node.name, v.name) for node in graph.nodes for v in node.variables()]


def save_weights(directory: Path, graph: BuiltGraph, weights: list[np.ndarray]) -> Path:
    """directory/weights.npz, whole or not at all."""
    arrays = {f"{n}/{v}": w for (n, v), w in zip(keys(graph), weights, strict=True)}
    path = directory / WEIGHTS_FILE
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
    np.savez(tmp, **arrays)  # type: ignore[arg-type]
    os.replace(tmp, path)
    return path


def load_init(spec: JobSpec, backend: Backend, splits: Splits, workdir: Path) -> str | None:
    """Warm-start a fresh (not resumed) attempt of the job in workdir when its spec says so;
    what went wrong, or None."""
    if spec.init is None:
        return None
    try:
        warm_start(spec, backend, graph_for(spec, splits), workdir.parent)
    except WarmStartError as exc:
        return str(exc)
    return None


def warm_start(spec: JobSpec, backend: Backend, graph: BuiltGraph, jobs_dir: Path) -> None:
    """Set the listed nodes' variables from the source job's weights.npz (under jobs_dir, the
    directory of every job's files); the others keep their initial values."""
    init = spec.init
    assert init is not None and init.nodes != "matching", "resolved at submit"
    path = JobFiles.of(jobs_dir, init.from_job).model_dir / WEIGHTS_FILE
    if not path.is_file():
        raise WarmStartError(
            f"init: job {init.from_job}'s weights ({WEIGHTS_FILE}) are not on this worker; "
            "its files are gone or it finished before weights were kept by node"
        )
    taken, weights = set(init.nodes), backend.get_weights()
    with np.load(path, allow_pickle=False) as saved:
        for i, (node, variable) in enumerate(keys(graph)):
            if node in taken:
                weights[i] = _take(saved, node, variable, weights[i].shape, init.from_job)
    backend.set_weights(weights)


def _take(saved: Any, node: str, variable: str, shape: tuple[int, ...], job: str) -> np.ndarray:
    key = f"{node}/{variable}"
    if key not in saved.files:
        raise WarmStartError(f"init: job {job}'s weights have no {key}")
    array = np.asarray(saved[key], dtype=np.float32)
    if array.shape != shape:
        raise WarmStartError(f"init: {key} is {array.shape} in job {job}'s weights, {shape} here")
    return array


def lineage(spec: JobSpec) -> dict[str, Any] | None:
    """Where the job's first weights came from, for its result and model card: the job it
    continues, or the one it was warm-started from."""
    init = spec.init
    if spec.continues is not None:
        return {"continues": spec.continues}
    if init is None:
        return None
    return {"from_job": init.from_job, "nodes": init.nodes, "checkpoint": init.checkpoint}


def adopt_parent_checkpoint(spec: JobSpec, workdir: Path) -> str | None:
    """For a job that continues another and has no checkpoint of its own yet: the parent's
    last checkpoint copied in as its own, so the attempt resumes from it as from one of its
    own (weights, optimizer state, schedule, early stopping, epoch). What went wrong, or None.

    Every rank of a job may do this at once: each copies to a name of its own and renames it
    into place, and a rank that finds the checkpoint there already keeps it."""
    if spec.continues is None:
        return None
    own = JobFiles(workdir).checkpoints
    if latest_checkpoint(own) is not None:  # a later attempt: its own checkpoints go on
        return None
    parent = latest_checkpoint(JobFiles.of(workdir.parent, spec.continues).checkpoints)
    if parent is None:
        return f"continues: job {spec.continues}'s last checkpoint is not on this worker"
    own.mkdir(parents=True, exist_ok=True)
    final, tmp = own / parent.name, own / f".tmp-{parent.name}-{os.getpid()}"
    if not final.exists():
        shutil.copytree(parent, tmp)
        with contextlib.suppress(OSError):  # another rank put it there first
            os.rename(tmp, final)
        shutil.rmtree(tmp, ignore_errors=True)
    pointer = latest_pointer(own)
    pointer_tmp = pointer.with_name(f".{pointer.name}.{os.getpid()}")
    pointer_tmp.write_text(parent.name)
    os.replace(pointer_tmp, pointer)
    return None
