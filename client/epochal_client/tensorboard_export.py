"""Jobs as TensorBoard runs: per-epoch scalars and the spec in the hparams view (tensorboardX,
the `tensorboard` extra; no TensorFlow). One run directory per job, named by its name and id.

    epochal tensorboard JOB_ID... --logdir runs && tensorboard --logdir runs
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from epochal_client.types import SCORES, SPLITS, Job, MetricRow, score_field

# Metrics rows become tags grouped by metric, so train and val share a chart section.
SCALAR_TAGS = {
    **{score_field(split, score): f"{score}/{split}" for score in SCORES for split in SPLITS},
    "learning_rate": "optimizer/learning_rate",
    "epoch_seconds": "speed/epoch_seconds",
    "samples_per_second": "speed/samples_per_second",
    "data_wait_seconds": "speed/data_wait_seconds",
    "data_read_bytes": "input/data_read_bytes",
    "data_cache_hits": "input/data_cache_hits",
    "data_cache_misses": "input/data_cache_misses",
}
# The evaluation keys of job.result: a split's score.
FINAL = re.compile(rf"^(train|val|test)_({'|'.join(SCORES)})$")
HPARAM_PREFIX = "hparam/"


def run_name(job: Job) -> str:
    """The job's run directory: its name (file-safe) and the start of its id."""
    safe = re.sub(r"[^\w.\-]", "-", job.name)
    return f"{safe}-{job.id[:8]}"


def flatten(spec: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The spec as `a.b` keys with scalar values; lists become text ("128,64"), None is left out."""
    flat: dict[str, Any] = {}
    for key, value in spec.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat |= flatten(value, f"{name}.")
        elif isinstance(value, list | tuple):
            flat[name] = ",".join(map(str, value))
        elif value is not None:
            flat[name] = value
    return flat


def hyperparameters(job: Job) -> dict[str, Any]:
    """What the hparams view compares runs by: the framework and the flattened spec."""
    spec = {k: v for k, v in job.spec.items() if k not in ("tags", "name")}
    return {"framework": job.framework, **flatten(spec)}


def final_metrics(job: Job, rows: Sequence[MetricRow]) -> dict[str, float]:
    """The job's closing numbers as hparam metrics: its evaluation, and its last epoch's row."""
    metrics: dict[str, float] = {}
    for key, value in (job.result or {}).items():
        if FINAL.match(key) and isinstance(value, int | float) and not isinstance(value, bool):
            metrics[f"{HPARAM_PREFIX}{key}"] = float(value)
    if rows:
        for field in (score_field(split, score) for split in SPLITS for score in SCORES):
            value = getattr(rows[-1], field)
            if value is not None:
                metrics[f"{HPARAM_PREFIX}last_{field}"] = float(value)
    return metrics


def write_run(logdir: Path, job: Job, rows: Sequence[MetricRow]) -> Path:
    """Write one job's event file under logdir; returns its run directory."""
    try:
        from tensorboardX import SummaryWriter
        from tensorboardX.summary import hparams
    except ImportError as exc:
        raise RuntimeError("install the extra: pip install 'epochal-client[tensorboard]'") from exc
    run_dir = logdir / run_name(job)
    last_epoch = rows[-1].epoch if rows else 0
    with SummaryWriter(logdir=str(run_dir)) as writer:
        for row in rows:
            for field, tag in SCALAR_TAGS.items():
                value = getattr(row, field)
                if value is not None:
                    writer.add_scalar(tag, value, row.epoch)
        metrics = final_metrics(job, rows)
        # In the run itself (not a sub-run as add_hparams makes): the view reads each metric
        # from this run's scalar of the same tag.
        for summary in hparams(hyperparameters(job), metrics):
            writer.file_writer.add_summary(summary)
        for tag, value in metrics.items():
            writer.add_scalar(tag, value, last_epoch)
    return run_dir
