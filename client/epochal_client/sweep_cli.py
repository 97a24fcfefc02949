"""`epochal sweep submit | show | list | cancel`: sweeps from the command line, a live table
of trials with the best so far, and `--plot` (objective per trial, every validation curve)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table

from epochal_client.client import Client
from epochal_client.render import fmt, status_text
from epochal_client.sweeps import SWEEP_EXIT, Sweep
from epochal_client.terminal import connect, console, load_spec

sweep = typer.Typer(help="Sweeps: hyperparameter search, every trial a job.", no_args_is_help=True)
STATE_STYLE = {"complete": "green", "pruned": "yellow", "failed": "red", "running": "cyan"}


def trials_table(item: Sweep) -> Table:
    """Every trial: number, state, epochs run, objective, parameters; the best one marked."""
    metric = item.objective.get("metric", "objective")
    best = (item.best or {}).get("number")
    title = (
        f"sweep {item.name} {item.id} — {item.status}, {item.trials_launched}/{item.max_trials} "
        f"trials, {item.epochs_spent}/{item.epochs_full} epochs"
    )
    table = Table(title=title, title_justify="left")
    for column in ("#", "state", "epochs", metric, "parameters", "job"):
        table.add_column(column)
    for trial in item.trials:
        state = trial["state"]
        style = STATE_STYLE.get(state, "dim")
        params = ", ".join(f"{k}={json.dumps(v)}" for k, v in trial["params"].items())
        mark = " ★" if trial["number"] == best else ""
        table.add_row(
            f"{trial['number']}{mark}",
            f"[{style}]{state}[/]",
            f"{trial['epochs_run']}/{trial['epochs']}",
            fmt(trial["objective"]),
            params,
            trial["job_id"],
        )
    notes = [f"best: trial {best}, {metric} {fmt(item.best['objective'])}"] if item.best else []
    if item.error:
        notes.append(f"failed: {item.error}")
    if notes:
        table.caption = "; ".join(notes)
    return table


def follow_sweep(client: Client, sweep_id: str, poll: float = 2.0) -> int:
    """A live table until every trial ended; the exit code of its final status."""
    item = client.get_sweep(sweep_id)
    with Live(trials_table(item), refresh_per_second=2) as live:
        while not item.done:
            time.sleep(poll)
            item = client.get_sweep(sweep_id)
            live.update(trials_table(item))
    return SWEEP_EXIT.get(item.status, 1)


def plot_sweep(client: Client, item: Sweep, path: Path) -> Path:
    """Objective per trial (by state), and each trial's objective per epoch, overlaid."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("--plot needs matplotlib: pip install 'epochal-client[plot]'") from exc
    metric = item.objective.get("metric", "val_loss")
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"complete": "tab:green", "pruned": "tab:orange", "failed": "tab:red"}
    for trial in item.trials:
        color = colors.get(trial["state"], "tab:gray")
        if trial["objective"] is not None:
            left.scatter(trial["number"], trial["objective"], color=color)
        rows = client.metrics(trial["job_id"])
        points = [(r.epoch, getattr(r, metric)) for r in rows if getattr(r, metric) is not None]
        if points:  # a pruned trial's curve ends where it stopped
            right.plot(*zip(*points, strict=True), "-o", markersize=2, color=color, alpha=0.7)
    left.set(xlabel="trial", ylabel=metric, title="objective per trial")
    right.set(xlabel="epoch", ylabel=metric, title="every trial's curve")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    figure.suptitle(f"sweep {item.name} ({item.status})")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _client() -> Any:

    return connect()


PlotOption = Annotated[Path | None, typer.Option(help="write the sweep's plot to FILE.png")]


@sweep.command("submit")
def submit(
    sweep_file: Annotated[Path, typer.Argument(help="a sweep spec, .json or .yaml")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="a live table to the end")] = False,
    plot: PlotOption = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="override a field, repeatable: max_trials=2, base.training.epochs=3"
        ),
    ] = None,
) -> None:
    """Submit a sweep and print its id; --follow exits 0 succeeded, 1 failed, 3 cancelled."""

    spec = load_spec(sweep_file, set_ or [])
    with _client() as client:
        item = client.submit_sweep(spec)
        console.print(item.id, highlight=False)
        if not follow:
            return
        code = follow_sweep(client, item.id)
        if plot:
            console.print(f"wrote {plot_sweep(client, client.get_sweep(item.id), plot)}")
        raise typer.Exit(code)


@sweep.command("show")
def show(
    sweep_id: Annotated[str, typer.Argument()],
    as_json: Annotated[bool, typer.Option("--json", help="the raw sweep as JSON")] = False,
    plot: PlotOption = None,
) -> None:
    """One sweep: its trials, the best so far, epochs spent."""

    with _client() as client:
        item = client.get_sweep(sweep_id)
        if plot:
            console.print(f"wrote {plot_sweep(client, item, plot)}")
    if as_json:
        print(json.dumps(item.raw, indent=2))
        return
    console.print(trials_table(item))


@sweep.command("list")
def list_(limit: Annotated[int, typer.Option(help="at most this many")] = 20) -> None:
    """List sweeps, newest first."""

    with _client() as client:
        found = client.sweeps(limit)
    table = Table("id", "name", "status", "trials", "objective", "best", "created")
    for item in found:
        objective = f"{item.objective.get('metric')} ({item.objective.get('mode')})"
        table.add_row(
            item.id,
            item.name,
            status_text(item.status),
            f"{item.trials_launched}/{item.max_trials}",
            objective,
            fmt(item.best_objective),
            fmt(item.created_at),
        )
    console.print(table)


@sweep.command("cancel")
def cancel(sweep_id: Annotated[str, typer.Argument()]) -> None:
    """Stop launching trials and cancel the queued and running ones."""

    with _client() as client:
        item = client.cancel_sweep(sweep_id)
    console.print(f"{item.id} {item.status}", highlight=False)
