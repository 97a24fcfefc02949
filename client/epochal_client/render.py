"""How the client commands show things: rich tables, CSV, and the matplotlib plot of a job."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.table import Column, Table

from epochal_client.types import ROW_FIELDS, Job, MetricRow, WorkerInfo, score_field

STATUS_STYLE = {
    "queued": "dim",
    "running": "cyan",
    "cancelling": "yellow",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "yellow",
}


def fmt(value: Any) -> str:
    """Numbers to 4 significant digits, datetimes local and short, None as a dash."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, datetime):
        return value.astimezone().strftime("%m-%d %H:%M:%S")
    return str(value)


def _when(value: Any) -> Any:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return value


def status_text(status: str) -> str:
    return f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]"


def best_text(job: Job) -> str | None:
    """The best epoch and the metric it was chosen by: `val_loss 0.3121 @ epoch 4`."""
    if not job.best_epoch:
        return None
    return f"{job.best_metric_name or 'best'} {fmt(job.best_metric)} @ epoch {job.best_epoch}"


def jobs_table(jobs: Sequence[Job]) -> Table:
    table = Table("name", "framework", "status", "epoch", "best", "created", box=None)
    table.columns.insert(0, Column("id", no_wrap=True, min_width=36))  # ids are for copying
    for job in jobs:
        best = best_text(job) or "–"
        table.add_row(
            job.id,
            job.name,
            job.framework,
            status_text(job.status),
            f"{job.current_epoch}/{job.epochs}",
            best,
            fmt(job.created_at),
        )
    return table


def steps_text(job: Job) -> str:
    """`step 37/118` while an epoch is in progress (the one after current_epoch), else ''."""
    steps = job.steps_in_progress
    return f"step {steps[0]}/{steps[1]}" if steps else ""


def progress_text(job: Job) -> str:
    """`3/20 epochs (epoch 4: step 37/118)`."""
    steps = steps_text(job)
    within = f" (epoch {job.current_epoch + 1}: {steps})" if steps else ""
    return f"{job.current_epoch}/{job.epochs} epochs{within}"


def job_details(job: Job) -> Table:
    table = Table(show_header=False, box=None)
    rows: list[tuple[str, Any]] = [
        ("id", job.id),
        ("name", job.name),
        ("framework", job.framework),
        ("status", status_text(job.status)),
        ("stop reason", job.stop_reason),
        ("attempt", job.attempt),
        ("progress", progress_text(job)),
        ("best", best_text(job)),
        ("waiting because", job.wait_reason),
        ("error", f"[red]{job.error_code}: {job.error}[/]" if job.error else None),
        ("created", job.created_at),
        ("started", job.started_at),
        ("finished", job.finished_at),
        ("tags", ", ".join(f"{k}={v}" for k, v in job.tags.items()) or None),
        ("model", model_line(job.model_summary)),
    ]
    # the evaluation report has tables of its own (evaluation_tables); warnings a row each
    result = {k: v for k, v in (job.result or {}).items() if k not in ("evaluation", "warnings")}
    rows += [("warning", f"[yellow]{w}[/]") for w in (job.result or {}).get("warnings") or []]
    rows += list(flat(result, "result").items())
    for label, value in rows:
        if value is not None:
            table.add_row(f"[bold]{label}[/]", value if isinstance(value, str) else fmt(value))
    return table


def flat(value: Any, prefix: str) -> dict[str, Any]:
    """Nested objects as dotted keys (`result.export.onnx.max_abs_diff`), not as raw JSON."""
    if not isinstance(value, dict) or not value:
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, item in value.items():
        out.update(flat(item, f"{prefix}.{key}"))
    return out


def model_line(summary: dict[str, Any] | None) -> str | None:
    """The model in one line: parameters, FLOPs per sample, layers (head included)."""
    if not summary:
        return None
    frozen = summary.get("frozen_parameters") or 0  # absent from older services
    counted = f"{summary['parameters']:,} parameters"
    if frozen:
        counted = f"{summary['parameters']:,} trainable and {frozen:,} frozen parameters"
    return (
        f"{counted}, {summary['flops_per_sample']:,} FLOPs per sample, "
        f"{len(summary['layers'])} layers"
    )


def layers_table(job: Job) -> Table | None:
    """Each layer of the built model: name, op, output shape, parameters (None without one)."""
    if not job.model_summary:
        return None
    table = Table("layer", "op", "output shape", "parameters", box=None)
    for layer in job.model_summary["layers"]:
        shape = str(tuple(layer["output_shape"]))  # as the service's messages write shapes
        frozen = layer.get("frozen_parameters") or 0
        count = f"{frozen:,} frozen" if frozen else f"{layer['parameters']:,}"
        table.add_row(layer["name"], layer["op"], shape, count)
    return table


def evaluation_tables(result: dict[str, Any] | None) -> list[Table]:
    """The result's evaluation report: per-class table and top confusions, or the regression
    errors; nothing for a job without one."""
    report = (result or {}).get("evaluation")
    if not report:
        return []
    where = f"evaluation on {report['split']} ({report['samples']} samples)"
    if report["task"] == "regression":
        table = Table(
            "metric", "value", title=where, box=None, title_justify="left", min_width=len(where)
        )
        for name in ("mae", "rmse", "r2"):
            table.add_row(name, fmt(report[name]))
        for q, value in report["residual_quantiles"].items():
            table.add_row(f"residual p{q}", fmt(value))
        return [table]
    title = f"{where}: accuracy {fmt(report['accuracy'])}, macro F1 {fmt(report['macro_f1'])}"
    label = class_label(report)
    headers = ("class", "precision", "recall", "f1", "support")
    classes = Table(*headers, title=title, box=None, title_justify="left", min_width=len(title))
    for row in report["per_class"]:
        cells = [fmt(row[k]) for k in ("precision", "recall", "f1", "support")]
        classes.add_row(label(row["class"]), *cells)
    confusions = Table(
        "true",
        "predicted as",
        "count",
        title="most frequent confusions",
        box=None,
        title_justify="left",
    )
    for pair in report["top_confusions"]:
        confusions.add_row(label(pair["true"]), label(pair["predicted"]), str(pair["count"]))
    return [classes, confusions]


def class_label(report: dict[str, Any]) -> Any:
    """A class index to its label: the report's `classes` (names for Fashion-MNIST), if any."""
    names = report.get("classes") or []
    return lambda index: str(names[index]) if 0 <= index < len(names) else str(index)


def transitions_table(job: Job) -> Table:
    table = Table("at", "change", "reason", "attempt", box=None)
    for t in job.transitions:
        change = f"{t.get('from_status') or '–'} → {status_text(t['to_status'])}"
        at, attempt = fmt(_when(t.get("at"))), str(t.get("attempt", ""))
        table.add_row(at, change, t.get("reason", ""), attempt)
    return table


def used_columns(rows: Sequence[MetricRow]) -> list[str]:
    """The metric columns that hold a value in some row (accuracy or mae, not both)."""
    return [c for c in ROW_FIELDS if any(getattr(r, c) is not None for r in rows)]


def metrics_table(rows: Sequence[MetricRow], columns: Sequence[str] | None = None) -> Table:
    columns = list(columns or used_columns(rows) or ["epoch"])
    table = Table(*columns, box=None)
    for row in rows:
        table.add_row(*(fmt(getattr(row, c)) for c in columns))
    return table


def metrics_csv(rows: Sequence[MetricRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(ROW_FIELDS)
    for row in rows:
        writer.writerow(["" if getattr(row, c) is None else getattr(row, c) for c in ROW_FIELDS])
    return out.getvalue()


def workers_table(workers: Sequence[WorkerInfo]) -> Table:
    table = Table("name", "hostname", "gpus", "devices", "current job", "heartbeat", box=None)
    for w in workers:
        devices = ", ".join(
            str(d.get("name") or d.get("id")) if isinstance(d, dict) else str(d) for d in w.devices
        )
        table.add_row(
            w.name,
            w.hostname or "–",
            str(w.gpus),
            devices or "–",
            w.current_job_id or "idle",
            fmt(w.heartbeat_at),
        )
    return table


def queue_table(view: dict[str, Any]) -> Table:
    """The queue: jobs by position with why they wait and when they may start, then counts."""
    table = Table("pos", "job", "name", "priority", "gpus", "estimated start", "reason", box=None)
    for e in view.get("jobs", []):
        start = e.get("estimated_start")
        table.add_row(
            "–" if e.get("position") is None else str(e["position"]),  # not worked out yet
            e["id"],
            e["name"],
            str(e["priority"]),
            str(e["gpus"]),
            fmt(datetime.fromisoformat(start)) if start else "–",
            e["reason"],
        )
    for c in view.get("others", []):
        owner = c.get("owner") or f"key {c['owner_id'] or '–'}"  # an older server names keys
        table.add_row("", f"{c['jobs']} queued", owner, str(c["priority"]), "", "", "")
    return table


def plot_metrics(job: Job, rows: Sequence[MetricRow], path: Path) -> Path:
    """Loss and accuracy (or MAE) curves, train and validation, the best epoch marked."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; never a window
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:  # the API image does not ship it
        raise RuntimeError("--plot needs matplotlib: pip install 'epochal[plot]'") from exc
    metric = "mae" if any(r.train_mae is not None for r in rows) else "accuracy"
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    epochs = [r.epoch for r in rows]
    for ax, name in zip(axes, ("loss", metric), strict=True):
        for split, style in (("train", "-o"), ("val", "-s")):
            values = [getattr(r, score_field(split, name)) for r in rows]
            points = [(e, v) for e, v in zip(epochs, values, strict=True) if v is not None]
            if points:
                ax.plot(*zip(*points, strict=True), style, markersize=3, label=f"{split} {name}")
        if job.best_epoch:
            ax.axvline(
                job.best_epoch, color="green", linestyle="--", label=f"best epoch {job.best_epoch}"
            )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.legend()
    figure.suptitle(f"{job.name} ({job.framework}, {job.status})")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
