"""service_overhead_pct: a 5-epoch Fashion-MNIST job through the service against the same loop
called directly in one process, and where the difference goes.

Direct: a fresh process imports the framework (not timed: a worker's warm child has done that
too), then times data loading, building the model, `fit` and the test evaluation: what a user
who runs the loop by hand waits for, with the intra-op thread count that suits this machine
best (each of 1..N CPUs is tried; the service picks its own, worker.supervisor.threads).
Service: from `POST /v1/jobs` returning to the job's `finished_at`, with an idle worker on the
embedded default. Runs alternate, medians reported.
The service's extra parts come from the job's own record: the queued→running transition and
the `timings` the training child puts in the result (startup, data, build, per-epoch DB rows
and checkpoints, export, final evaluation); what is left is recording the end.

`python -m benchmarks.service.overhead direct FRAMEWORK EPOCHS THREADS` is the direct case.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from datetime import UTC, datetime
from statistics import median
from typing import Any

import httpx

from benchmarks.service.cpu import wait_quiet
from benchmarks.service.latency import wait_terminal
from benchmarks.training.common import DATA_DIR, seed_equivalent_spec
from benchmarks.training.suite import run_case

# Where each framework's thread pools are set.
THREAD_POOLS = {
    "pytorch": "worker.training.torch.backend",
    "tensorflow": "worker.training.tf.strategy",
}
PARTS = ("queue_s", "startup_s", "data_s", "build_s", "db_write_s", "checkpoint_s", "export_s")


def direct(framework: str, epochs: int, threads: int) -> dict[str, float]:
    """The loop by hand, in this process: data, model, fit, test evaluation (no checkpoints),
    on exactly `threads` intra-op threads (inter-op as the service would give them): the
    pools are set here, so the back-end's own choice for a small step (TensorFlow's) does not
    apply and the sweep of 1..N really runs each count."""
    from app.schemas.job_spec import JobSpec
    from worker.child.attempt_outputs import final_result
    from worker.child.train_attempt import best_monitor, build_callbacks
    from worker.supervisor.threads import threads_for
    from worker.training.backend import BACKENDS, Placement, create_backend
    from worker.training.callbacks import CallbackList, TrainState
    from worker.training.data import load_splits
    from worker.training.loop import fit

    spec = JobSpec.model_validate(seed_equivalent_spec(framework, epochs))
    pools = threads_for(spec, threads)
    module = importlib.import_module(BACKENDS[framework].split(":")[0])
    module.preload()  # the framework's import, as a warm child has it
    pinned = Placement(gpus=[], threads=pools.intra, interop_threads=pools.inter)
    importlib.import_module(THREAD_POOLS[framework]).use_threads(pinned)
    load_splits(spec, DATA_DIR)  # decodes once into the cache, as the service's first job does
    time.sleep(1.0)  # let the machine settle after imports before the clock starts
    started = time.perf_counter()
    splits = load_splits(spec, DATA_DIR)
    placement = Placement(gpus=[])  # no threads: the back-end keeps the pools set above
    backend = create_backend(spec, splits, placement)
    state = TrainState(epochs=spec.training.epochs, learning_rate=spec.optimizer.learning_rate)
    validate = splits.x_val is not None
    callbacks = CallbackList(build_callbacks(spec, backend, best_monitor(spec, validate)))
    fit_started = time.perf_counter()
    fitted = fit(backend, state, callbacks, validate)
    train_s = time.perf_counter() - fit_started
    result = final_result(backend, splits, state, fitted.logs, 0.0)
    wall = time.perf_counter() - started
    return {"wall_s": wall, "train_s": train_s, "accuracy": result["test_accuracy"]}


def through_service(client: httpx.Client, spec: dict[str, Any]) -> dict[str, float]:
    """Wall time of one job as the user sees it, and its parts from the job's record."""
    response = client.post("/v1/jobs", json=spec)
    returned = datetime.now(UTC)
    response.raise_for_status()
    # Wall time comes from the job's own timestamps, so a slow poll costs no accuracy, and a
    # fast one would take CPU from the training it measures (2 cores here).
    job = wait_terminal(client, response.json()["id"], timeout=600, interval=1.0)
    if job["status"] != "succeeded":
        raise RuntimeError(f"overhead job ended {job['status']}: {job['error']}")
    running = next(t for t in job["transitions"] if t["to_status"] == "running")
    running_at = datetime.fromisoformat(running["at"])
    wall = (datetime.fromisoformat(job["finished_at"]) - returned).total_seconds()
    timings = job["result"]["timings"]
    parts = {"queue_s": max((running_at - returned).total_seconds(), 0.0)}
    parts |= {name: float(timings.get(name, 0.0)) for name in PARTS[1:]}
    train_s = timings["fit_s"] - timings["checkpoint_s"] - timings.get("db_write_s", 0.0)
    inside = parts["queue_s"] + sum(timings.get(k, 0.0) for k in ("startup_s", "data_s"))
    inside += timings["build_s"] + timings["fit_s"] + timings["export_s"]
    inside += timings["final_eval_s"]
    parts |= {"train_and_eval_s": train_s + timings["final_eval_s"], "record_end_s": wall - inside}
    parts["train_s"] = train_s
    return {"wall_s": wall, "accuracy": job["result"]["test_accuracy"], **parts}


def measure(client: httpx.Client, framework: str, epochs: int, runs: int) -> dict[str, Any]:
    """Alternating direct and service runs after one warm-up of each.

    On a shared 2-core VM a run's wall time varies by tens of percent and noise only ever adds
    time, so the headline compares the fastest run of each side; the median of per-run ratios
    is reported beside it.
    """
    spec = seed_equivalent_spec(framework, epochs)
    through_service(client, spec)  # warm-up: fills the data cache and the warm child pool
    counts = range(1, len(os.sched_getaffinity(0)) + 1)
    by_threads: dict[int, list[dict[str, Any]]] = {count: [] for count in counts}
    services = []
    for _ in range(runs):
        for count in counts:
            wait_quiet()  # e.g. the next warm child, importing after the service's last job
            by_threads[count].append(run_case("direct", framework, epochs, count, module=__name__))
        wait_quiet()
        services.append(through_service(client, spec))
    # The best count by its median: chosen by its fastest run, the direct side would get the
    # fastest of runs x counts against the service's fastest of runs, and so win on noise alone.
    best = min(counts, key=lambda count: median(d["wall_s"] for d in by_threads[count]))
    directs = by_threads[best]
    direct_s = min(d["wall_s"] for d in directs)
    service_s = min(s["wall_s"] for s in services)
    pairs = zip(services, directs, strict=True)
    parts = {
        name: median(s[name] for s in services)
        for name in services[0]
        if name not in ("wall_s", "accuracy", "train_s")
    }
    return {
        "direct_s": direct_s,
        "direct_threads": best,
        "service_s": service_s,
        "overhead_pct": 100 * (service_s - direct_s) / direct_s,
        "overhead_median_pct": 100
        * median((s["wall_s"] - d["wall_s"]) / d["wall_s"] for s, d in pairs),
        "direct_accuracy": median(d["accuracy"] for d in directs),
        # Training alone (the epochs, without the service's checkpoints and rows): samples/s
        # through the service over samples/s of the direct loop, fastest of each.
        "train_speed_ratio": min(d["train_s"] for d in directs)
        / min(s["train_s"] for s in services),
        "parts": parts,
    }


if __name__ == "__main__":
    if sys.argv[1] == "direct":
        import os

        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        result = direct(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        print("RESULT " + json.dumps(result), flush=True)
