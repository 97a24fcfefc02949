"""The pruning benchmark: the sweeps guide's example sweep
(examples/sweeps/pytorch-fashion-hyperband.yaml: 24 trials over learning rate, width and L2 of
a PyTorch MLP on Fashion-MNIST) with its Hyperband pruner against the same sampler and seed
without pruning (epochs trained, best objective), and the sweep without pruning on one worker
against two (wall time: the same 24 trials and epochs either way, where a Hyperband
sweep's work depends on its brackets, drawn from its random id). Everything real: the API and
Celery workers as processes, PostgreSQL and Redis, every trial a training process. The
measured curves are then replayed through Hyperband for many ids (benchmarks/service/replay.py).

Each worker's training processes run on one thread (EPOCHAL_WORKER_CPUS=1): on a 2-core machine
that other work shares, a thread per core in every process spends most of its time waiting for
a thread the scheduler gave to someone else.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import yaml
from rich.console import Console

from benchmarks.service.replay import replayed_fraction
from benchmarks.service.report import Report
from benchmarks.service.stack import bench_env, running
from epochal_client.sweep_cli import trials_table
from epochal_client.sweeps import Sweep
from epochal_client.types import build
from tests.helpers import ROOT, wait_until

EXAMPLE = ROOT / "examples" / "sweeps" / "pytorch-fashion-hyperband.yaml"
WORKER_ENV = {"EPOCHAL_WORKER_CPUS": "1", "EPOCHAL_WARM_FRAMEWORKS": "pytorch"}


def example_spec(quick: bool) -> dict[str, Any]:
    """The example sweep; --quick: 6 trials of 3 epochs on the first 6,000 images."""
    spec: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    if quick:
        spec["max_trials"] = 6
        spec["base"]["training"]["epochs"] = 3
        spec["base"]["dataset"]["limit"] = 6000
    return spec


def without_pruning(spec: dict[str, Any]) -> dict[str, Any]:
    """The same sweep, sampler and seed, every trial trained to the end."""
    return {**spec, "name": f"{spec['name']}-no-pruning", "pruner": {"name": "none"}}


def run_sweep(client: httpx.Client, spec: dict[str, Any]) -> dict[str, Any]:
    """Submit; wait until every trial ended; the sweep as the API shows it, plus wall_s."""
    started = time.perf_counter()
    response = client.post("/v1/sweeps", json=spec)
    response.raise_for_status()
    sweep_id = response.json()["id"]

    def ended() -> dict[str, Any] | None:
        sweep = client.get(f"/v1/sweeps/{sweep_id}").json()
        return sweep if sweep["finished_at"] else None

    sweep = wait_until(ended, 7200, f"sweep {sweep_id}", interval=1.0)
    return {**sweep, "wall_s": time.perf_counter() - started}


def measure(spec: dict[str, Any], workers: int, curves: bool = False) -> dict[str, Any]:
    """One sweep on a fresh database and Redis DB, with `workers` Celery workers; with
    `curves`, each trial's objective per epoch too (by trial number)."""
    with bench_env("postgres") as env:
        env |= WORKER_ENV
        with running(env, worker=True) as service:
            for extra in range(workers - 1):
                service.start_worker(f"worker-{extra + 2}")
            with service.client() as client:
                sweep = run_sweep(client, spec)
                if curves:
                    sweep["curves"] = [curve(client, t["job_id"], spec) for t in sweep["trials"]]
                return sweep


def curve(client: httpx.Client, job_id: str, spec: dict[str, Any]) -> list[float]:
    metric = spec["objective"]["metric"]
    rows = client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]
    return [row[metric] for row in sorted(rows, key=lambda r: r["epoch"])]


def print_trials(sweep: dict[str, Any]) -> None:
    """The pruned sweep as `epochal sweep show` draws it (the sweeps guide's worked example)."""
    raw = {key: value for key, value in sweep.items() if key not in ("wall_s", "curves")}
    Console(width=130, force_terminal=False).print(trials_table(build(Sweep, raw)))


def best_of(sweep: dict[str, Any]) -> float:
    return sweep["best"]["objective"] if sweep["best"] else float("nan")


def bench_pruning(report: Report, quick: bool) -> None:
    spec = example_spec(quick)
    trials, epochs, parallel = spec["max_trials"], spec["base"]["training"]["epochs"], 2
    pruned = measure(spec, 2)
    print_trials(pruned)
    full = measure(without_pruning(spec), 2, curves=True)
    alone = measure(without_pruning(spec), 1)
    rule = f"hyperband reduction_factor {spec['pruner']['params']['reduction_factor']}"
    setup = f"{trials} trials x {epochs} epochs, 2 workers"
    report.add("pruning_hyperband_epochs", pruned["epochs_spent"], "epochs", f"{rule}, {setup}")
    report.add("pruning_none_epochs", full["epochs_spent"], "epochs", f"no pruning, {setup}")
    fraction = pruned["epochs_spent"] / max(1, full["epochs_spent"])
    report.add("pruning_epoch_fraction", fraction, "", "this sweep's brackets; goal <= 0.33")
    replayed = replayed_fraction(full["curves"], spec["pruner"], parallel)
    spread = f"p10 {replayed['p10']:.2f}, p90 {replayed['p90']:.2f}; 200 ids, measured curves"
    report.add("pruning_epoch_fraction_replayed", replayed["mean"], "", spread)
    report.add("pruning_hyperband_trials_pruned", pruned["counts"].get("pruned", 0), "trials")
    report.add("pruning_hyperband_best_val_accuracy", best_of(pruned), "", "best complete trial")
    report.add("pruning_none_best_val_accuracy", best_of(full), "", "best complete trial")
    gap = 100 * (best_of(full) - best_of(pruned))
    report.add("pruning_best_gap_points", gap, "points", "no pruning - hyperband; goal <= 0.5")
    report.add("pruning_wall_s_2_workers", full["wall_s"], "s", "no pruning, submit to last end")
    report.add("pruning_wall_s_1_worker", alone["wall_s"], "s", "no pruning, the same trials")
    speedup = alone["wall_s"] / full["wall_s"]
    report.add("pruning_two_worker_speedup", speedup, "x", "wall time 1 worker / 2 workers")
    report.add("pruning_hyperband_wall_s_2_workers", pruned["wall_s"], "s", "submit to last end")
