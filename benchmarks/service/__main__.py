"""`python -m benchmarks.service [--quick]`: the service's own costs, side by side.

Prints `BENCH <name> <value> <unit>` lines and a table. Starts and stops everything it uses.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.machine import describe as machine
from benchmarks.service import (
    flood,
    gang,
    growth,
    latency,
    overhead,
    polling,
    predict,
    scheduler,
    sse,
    warm_import,
)
from benchmarks.service.pruning import bench_pruning
from benchmarks.service.queued_read import bench_queued_read
from benchmarks.service.report import Report
from benchmarks.service.resumable_upload import bench_upload
from benchmarks.service.stack import bench_env, running
from benchmarks.service.sweeps import bench_sweeps

# PostgreSQL + Redis (production), then SQLite + the filesystem broker (the embedded default).
KINDS = ("postgres", "sqlite")


def bench_latency(report: Report, jobs: int) -> None:
    for kind in ("postgres", "sqlite"):
        with (
            bench_env(kind) as env,
            running(env, worker=True) as service,
            service.client() as client,
        ):
            result = latency.submit_to_running(client, jobs)
        tag = "" if kind == "postgres" else "_embedded"
        report.add(f"submit_to_running_p50_ms{tag}", result["p50_ms"], "ms", f"{jobs} jobs, {kind}")
        report.add(f"submit_to_running_p99_ms{tag}", result["p99_ms"], "ms", f"{jobs} jobs, {kind}")
        report.add(
            f"tiny_job_turnaround_s{tag}", result["turnaround_s"], "s", "POST to finished, median"
        )


def bench_polling(report: Report, quick: bool, kinds: tuple[str, ...] = KINDS) -> None:
    jobs, epochs, seconds = (100, 100, 5) if quick else (1000, 1000, 20)
    for kind in kinds:
        with bench_env(kind) as env:
            results = polling.run_polling(
                env, api_workers=2, clients=200, seconds=seconds, jobs=jobs, epochs=epochs
            )
        tag = "" if kind == "postgres" else "_embedded"
        setup = f"200 clients x 1/s, {jobs}x{epochs} rows, 2 uvicorn workers, {kind}"
        poll = results["metrics_poll"]
        report.add(f"metrics_poll_p99_ms{tag}", poll["p99_ms"], "ms", setup)
        report.add(f"metrics_poll_p50_ms{tag}", poll["p50_ms"], "ms", setup)
        report.add(f"metrics_poll_rps{tag}", poll["rps"], "req/s", f"errors {poll['errors']}")
        half = results["metrics_poll_half"]
        report.add(f"metrics_poll_p99_ms_100_clients{tag}", half["p99_ms"], "ms", "half the load")
        report.add(f"metrics_poll_p50_ms_100_clients{tag}", half["p50_ms"], "ms", "half the load")
        saturation = results["metrics_saturation"]
        report.add(f"metrics_max_rps{tag}", saturation["rps"], "req/s", "32 clients back to back")
        running_list = results["running_list_poll"]
        route = "GET /v1/jobs?status=running, 50 a page"
        report.add(f"running_list_poll_p99_ms{tag}", running_list["p99_ms"], "ms", route)
        report.add(f"running_list_poll_p50_ms{tag}", running_list["p50_ms"], "ms", route)
        idle = results["idle"]["ms_per_s"]
        report.add(f"api_idle_cpu_ms_per_s{tag}", idle, "ms/s", "2 workers serving nothing")
        for phase, route in CPU_ROUTES.items():
            result = results[phase]
            note = f"{route}; load generator {result['client_cpu_us_per_request']:.0f} us/request"
            report.add(f"api_cpu_us_per_{phase}{tag}", result["api_cpu_us_per_request"], "us", note)
        fast, routed = results["job_read"], results["job_read_route"]
        ratio = routed["api_cpu_us_per_request"] / max(fast["api_cpu_us_per_request"], 1e-9)
        note = "GET /v1/jobs/{id}: API CPU through the FastAPI route / on the fast path, same run"
        report.add(f"job_read_route_over_fast_cpu{tag}", ratio, "x", note)
        if "floor" in results:  # PostgreSQL only
            floor = results["floor"]["api_cpu_us_per_request"]
            note = "uvicorn + one asyncpg read a GET and nothing else, 100 clients x 1/s, same run"
            report.add(f"api_cpu_us_per_floor{tag}", floor, "us", note)
            ratio = fast["api_cpu_us_per_request"] / max(floor, 1e-9)
            note = "GET /v1/jobs/{id} on the fast path / the floor: the service's own share"
            report.add(f"job_read_over_floor_cpu{tag}", ratio, "x", note)


# The load phase whose API CPU is charged to each route.
CPU_ROUTES = {
    "metrics_poll": "GET /v1/jobs/{id}/metrics?since_epoch, 200 clients x 1/s",
    "metrics_poll_half": "the same, 100 clients x 1/s (the load of GET /v1/jobs/{id} below)",
    "metrics_saturation": "the same, 32 clients back to back",
    "running_list_poll": "GET /v1/jobs?status=running, 200 clients x 1/s",
    "job_read": "GET /v1/jobs/{id} (fast path), 100 clients x 1/s",
    "job_read_route": "the same through the FastAPI route (?_=%30), 100 clients x 1/s",
    "job_read_own_keys": "GET /v1/jobs/{id}, 100 clients x 1/s, each with a key of its own",
}


def bench_sse(report: Report, quick: bool, kinds: tuple[str, ...] = KINDS) -> None:
    for kind in kinds:
        with bench_env(kind) as env:
            stream = sse.run_sse(env, jobs=20, per_job=10, seconds=5 if quick else 15)
        tag = "" if kind == "postgres" else "_embedded"
        setup = f"{stream['subscribers']} subscribers on 20 running jobs, 1 epoch/job/0.5 s"
        setup += f", {kind}, {stream['errors']} errors {stream['first_error']}".rstrip()
        report.add(f"sse_events_per_s{tag}", stream["events_per_s"], "events/s", setup)
        report.add(f"sse_lag_p50_ms{tag}", stream["lag_p50_ms"], "ms", "row commit to client")
        report.add(f"sse_lag_p99_ms{tag}", stream["lag_p99_ms"], "ms", "row commit to client")
        print(f"worst lag by round ({kind}): {stream['worst_lag_ms_by_epoch']}", flush=True)
        report.add(f"sse_join_s{tag}", stream["join_s"], "s", "until all 200 streams answered")
        note = "API CPU while streaming, per event delivered"
        report.add(f"api_cpu_us_per_sse_event{tag}", stream["api_cpu_us_per_event"], "us", note)


def bench_growth(report: Report, quick: bool) -> None:
    metric_steps = (10, 100) if quick else (10, 100, 1000)
    list_steps = (1000, 10_000) if quick else (1000, 10_000, 100_000)
    with bench_env("postgres") as env:
        points = growth.metrics_growth(env, metric_steps)
    for rows, ms in points:
        report.add(f"metrics_read_ms_at_{rows}_rows", ms, "ms", "since_epoch read, PostgreSQL")
    report.add("metrics_read_slope_ms_per_10x", growth.slope_per_decade(points), "ms", "flat is ~0")
    with bench_env("postgres") as env:
        points = growth.list_growth(env, list_steps)
    for count, ms in points:
        report.add(f"job_list_ms_at_{count}_jobs", ms, "ms", "first page and a deep cursor page")
    report.add("job_list_slope_ms_per_10x", growth.slope_per_decade(points), "ms", "flat is ~0")


def bench_overhead(report: Report, quick: bool) -> None:
    epochs, runs = (2, 1) if quick else (5, 5)
    # The embedded default as `make run` starts it: its own heartbeat and maintenance intervals.
    with bench_env("sqlite", fast=False) as env, running(env, worker=True) as service:
        with service.client() as client:
            for framework in ("pytorch", "tensorflow"):
                result = overhead.measure(client, framework, epochs, runs)
                note = f"{epochs}-epoch Fashion-MNIST, embedded default, fastest of {runs}"
                report.add(f"service_overhead_pct_{framework}", result["overhead_pct"], "%", note)
                report.add(
                    f"service_overhead_median_pct_{framework}",
                    result["overhead_median_pct"],
                    "%",
                    "median of per-run ratios",
                )
                report.add(f"direct_wall_s_{framework}", result["direct_s"], "s", "in-process")
                ratio, speed = result["train_speed_ratio"], "training samples/s: service / direct"
                report.add(f"service_train_speed_ratio_{framework}", ratio, "x", speed)
                threads = "the direct run's best intra-op thread count of 1..N"
                report.add(f"direct_threads_{framework}", result["direct_threads"], "", threads)
                report.add(f"service_wall_s_{framework}", result["service_s"], "s", "POST to end")
                for part, seconds in result["parts"].items():
                    report.add(f"overhead_{part}_{framework}", seconds, "s", "median")


def bench_predict(report: Report, quick: bool) -> None:
    with bench_env("postgres") as env:
        env["EPOCHAL_WARM_FRAMEWORKS"] = "pytorch"  # the job is PyTorch: no TensorFlow standby
        with running(env, worker=True) as service, service.client() as client:
            artifacts = Path(env["EPOCHAL_HOME"]) / "artifacts"
            job_id, row_shape, source = predict.trained_job(client, artifacts)
            result = predict.measure(client, job_id, row_shape, quick)
    setup = f"digits MLP 128-64 ({source}), 1 uvicorn worker, PostgreSQL, one client"
    for rows in ("1_row", "256_rows", "256_rows_npy"):
        body = ".npy body" if rows.endswith("npy") else "JSON body"
        report.add(f"predict_{rows}_p50_ms", result[f"{rows}_p50_ms"], "ms", f"{body}; {setup}")
        report.add(f"predict_{rows}_p99_ms", result[f"{rows}_p99_ms"], "ms", body)
        report.add(f"predictions_per_s_{rows}", result[f"{rows}_per_s"], "rows/s", body)
    baseline = "GET /v1/jobs/{id}: the same key check and job lookup, no model"
    report.add("predict_baseline_get_job_p50_ms", result["get_job_p50_ms"], "ms", baseline)


def bench_flood(report: Report, quick: bool) -> None:
    scrapers, seconds = (50, 5) if quick else (200, 20)
    with bench_env("postgres") as env:
        found = flood.run_flood(env, scrapers, seconds)
    probe = f"GET {flood.PROBE} with a key, 5 clients x 2/s"
    for phase, label in (("alone", "nothing else running"), ("flooded", f"{scrapers} scrapers")):
        result = found[phase]
        note = f"{probe}, {label}, errors {result['errors']}"
        report.add(f"probe_p50_ms_{phase}", result["p50_ms"], "ms", note)
        report.add(f"probe_p99_ms_{phase}", result["p99_ms"], "ms", "goal <= 200 when flooded")
        count = f"{result['requests']} requests"
        report.add(f"probe_max_ms_{phase}", result["max_ms"], "ms", count)
    scrape = found["scrapers"]
    note = f"{scrapers} clients back to back, unauthenticated; answers other than 200 (503 busy)"
    report.add("scrapes_per_s", scrape["rps"], "req/s", "GET /metrics, 2 uvicorn workers")
    refused = 100 * scrape["errors"] / max(scrape["requests"], 1)
    report.add("scrapes_refused_pct", refused, "%", note)


def bench_scheduler(report: Report, quick: bool) -> None:
    result = scheduler.measure(repeat=50 if quick else 300)
    setup = "10,000 queued jobs, 20 keys, PostgreSQL, in-process"
    for label, how in (("spread", "over 101 priorities"), ("one_priority", "all at one priority")):
        decide, claim = result[f"decide_{label}"], result[f"claim_{label}"]
        report.add(f"scheduler_decision_p50_ms_{label}", decide["p50_ms"], "ms", f"{setup}, {how}")
        report.add(f"scheduler_decision_p99_ms_{label}", decide["p99_ms"], "ms", "goal < 10")
        report.add(f"scheduler_claim_p50_ms_{label}", claim["p50_ms"], "ms", "pick + UPDATE + row")


def bench_warm(report: Report, quick: bool) -> None:
    result = warm_import.measure(3 if quick else 7)
    setup = "digits MLP 32, 5 epochs, back to back, embedded, every CPU but one"
    normal, idle, after = result["normal"], result["idle"], result["after"]
    report.add("warm_import_normal_fit_s", normal["fit_s"], "s", f"median; {setup}")
    report.add("warm_import_idle_fit_s", idle["fit_s"], "s", "median; the import at SCHED_IDLE")
    report.add("warm_import_fit_speedup", normal["fit_s"] / idle["fit_s"], "x", "normal / idle")
    report.add("warm_import_normal_wall_s", normal["wall_s"], "s", "median POST to end")
    report.add("warm_import_idle_wall_s", idle["wall_s"], "s", "median POST to end")
    note = "median; default threads: every core, the import after each job"
    report.add("warm_import_after_fit_s", after["fit_s"], "s", note)
    report.add("warm_import_after_wall_s", after["wall_s"], "s", "median POST to end")


GANG_LAYOUTS = (("2x1", "2 nodes x 1"), ("1x1", "1 node x 1"), ("1x2", "1 node x 2"))


def bench_gang(report: Report, quick: bool) -> None:
    epochs, runs = (3, 1) if quick else (5, 3)
    with bench_env("postgres") as env, running(env) as service, service.client() as client:
        gang.start_workers(service)
        for framework in gang.FRAMEWORKS:
            report_gang(report, framework, gang.measure(service, client, framework, epochs, runs))
    setup = f"Fashion-MNIST 12k, MLP 128-64, batch 128, {epochs} epochs, median of {runs}"
    report.add("gang_epochs", float(epochs), "epochs", setup)


def report_gang(report: Report, framework: str, found: dict[str, float]) -> None:
    """One framework's rows: first step and per-epoch cost per layout, and each against 1x1."""
    name = f"gang_{framework}"
    for key, what in (("first_step", "POST, workers free, to step 1"), ("epoch", "epochs 2..N")):
        for layout, label in GANG_LAYOUTS:
            report.add(
                f"{name}_{key}_s_{layout}", found[f"{key}_s_{layout}"], "s", f"{label}; {what}"
            )
            if layout != "1x1":
                report.add(f"{name}_{key}_{layout}_vs_1x1", found[f"{key}_s_{layout}_x"], "x")


STEPS = (
    "latency",
    "overhead",
    "warm",
    "polling",
    "queued",
    "sse",
    "growth",
    "predict",
    "sweeps",
    "pruning",
    "flood",
    "scheduler",
    "gang",
    "upload",
)


def run(
    quick: bool,
    only: str | None = None,
    kinds: tuple[str, ...] = KINDS,
    upload_size: int | None = None,
    upload_store: str = "directory",
) -> Report:
    """Every service benchmark (or one), BENCH lines as results arrive; the report.

    `kinds` narrows the polling and SSE steps to one database.
    """
    report = Report()
    steps = {
        "latency": lambda: bench_latency(report, 10 if quick else 50),
        "overhead": lambda: bench_overhead(report, quick),
        "warm": lambda: bench_warm(report, quick),
        "polling": lambda: bench_polling(report, quick, kinds),
        "queued": lambda: bench_queued_read(report, quick),
        "sse": lambda: bench_sse(report, quick, kinds),
        "growth": lambda: bench_growth(report, quick),
        "sweeps": lambda: bench_sweeps(report, quick),
        "pruning": lambda: bench_pruning(report, quick),
        "predict": lambda: bench_predict(report, quick),
        "flood": lambda: bench_flood(report, quick),
        "scheduler": lambda: bench_scheduler(report, quick),
        "gang": lambda: bench_gang(report, quick),
        "upload": lambda: bench_upload(report, quick, upload_size, upload_store),
    }
    for name in STEPS:
        if only in (None, name):
            steps[name]()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks.service")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--only", choices=STEPS, default=None)
    parser.add_argument("--db", choices=KINDS, default=None, help="polling and sse on one only")
    parser.add_argument(
        "--upload-size", type=int, default=None, help="the upload step's file, in MiB"
    )
    parser.add_argument("--upload-store", choices=("directory", "s3"), default="directory")
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    size = args.upload_size * 2**20 if args.upload_size else None
    kinds = (args.db,) if args.db else KINDS
    report = run(args.quick, args.only, kinds, size, args.upload_store)
    print()
    print(report.table(f"epochal service benchmarks ({machine()})"))


if __name__ == "__main__":
    main()
