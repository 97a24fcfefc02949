"""The dashboard in a real headless browser (Debian's chromium driven by Playwright) against a
live service: log in, submit from the editor, watch the curve grow live, cancel."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.schemas.job_spec import JobSpec
from tests.helpers import (
    ROOT,
    Service,
    migrate_in_subprocess,
    running_service,
    scaled,
    submit_job,
    wait_for_status,
    wait_until,
)

pytestmark = pytest.mark.e2e
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SHOTS = ROOT / "test-artifacts"


def require_browser() -> Any:
    """Playwright's sync API, or a skip — a failure where CI demands the browser test."""
    missing = None
    try:
        from playwright import sync_api
    except ImportError:
        missing = "the playwright package is not installed (make install)"
    if missing is None and not CHROMIUM.exists():
        missing = f"{CHROMIUM} is missing (make install puts Debian's chromium in with apt)"
    if missing is not None:
        if os.environ.get("EPOCHAL_REQUIRE_BROWSER"):
            pytest.fail(missing)
        pytest.skip(missing)
    return sync_api


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    require_browser()
    env = {"EPOCHAL_HOME": str(tmp_path_factory.mktemp("ui") / "home")}
    migrate_in_subprocess(env)
    with running_service(env) as svc:
        yield svc


@pytest.fixture
def page(service: Service) -> Iterator[Any]:
    sync_api = require_browser()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(60_000)
        page.errors, page.urls = [], []
        page.on("pageerror", lambda error: page.errors.append(error))
        page.on("request", lambda request: page.urls.append(request.url))
        page.on("dialog", lambda dialog: dialog.accept())  # "Cancel job …?"
        try:
            yield page
        finally:
            browser.close()


def points(page: Any) -> int:
    path = page.locator("[data-testid=loss-chart] path[data-series=train]")
    return int(path.get_attribute("data-points") or 0) if path.count() else 0


def test_dashboard_submits_streams_the_curve_and_cancels(service: Service, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{service.url}/ui")
    page.get_by_test_id("api-key").fill("ep_000000000000_wrong")
    page.get_by_test_id("login").click()
    expect(page.locator("form.login .error")).to_contain_text("401")
    page.get_by_test_id("api-key").fill(service.api_key)
    page.get_by_test_id("login").click()
    expect(page.get_by_test_id("jobs")).to_be_visible()

    page.get_by_test_id("nav-submit").click()
    editor = page.get_by_test_id("spec-editor")
    expect(editor).to_be_visible()
    defaults = JobSpec.model_validate({"name": "my-job", "framework": "pytorch",
                                       "dataset": {"name": "digits"}})  # fmt: skip
    assert json.loads(editor.input_value()) == defaults.model_dump(mode="json")

    spec = json.loads(editor.input_value())
    spec["training"]["epochs"] = 0
    editor.fill(json.dumps(spec))
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("submit-error")).to_contain_text("training.epochs")

    # Short epochs (a few hundred steps), far more of them than the test waits for.
    spec |= {"name": "browser-job", "training": {"epochs": 1000, "batch_size": 16}}
    spec["dataset"] = {"name": "synthetic", "samples": 4000}
    editor.fill(json.dumps(spec))
    page.get_by_test_id("submit").click()
    expect(page).to_have_url(re.compile(r"#/jobs/[0-9a-f-]{36}$"))
    job_id = page.url.rsplit("/", 1)[1]

    expect(page.get_by_test_id("status")).to_have_text("running")
    deadline = time.monotonic() + scaled(120)
    while points(page) < 3:  # epochs arrive over SSE without reloading the page
        assert time.monotonic() < deadline, "the loss curve did not grow to 3 epochs"
        page.wait_for_timeout(250)
    first = points(page)
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "dashboard-job.png"), full_page=True)
    expect(page.get_by_test_id("transitions")).to_contain_text("queued → running")

    page.get_by_test_id("cancel").click()
    expect(page.get_by_test_id("status")).to_have_text("cancelled")
    expect(page.get_by_test_id("transitions")).to_contain_text("cancelling → cancelled")
    expect(page.get_by_test_id("cancel")).to_be_hidden()
    assert points(page) >= first

    page.goto(f"{service.url}/ui#/")
    row = page.locator(f"[data-job='{job_id}']")
    expect(row).to_contain_text("cancelled")
    expect(row).to_contain_text("browser-job")
    page.screenshot(path=str(SHOTS / "dashboard-jobs.png"), full_page=True)

    assert page.errors == []
    # The key travels in a header only: never in a URL a proxy or access log would keep.
    assert not [url for url in page.urls if service.api_key in url]
    with service.client() as http:
        assert http.get(f"/v1/jobs/{job_id}").json()["status"] == "cancelled"


def test_a_succeeded_jobs_page_draws_the_confusion_matrix(service: Service, page: Any) -> None:
    from playwright.sync_api import expect

    from app.schemas.dataset_spec import CLASS_NAMES

    with service.client() as http:
        dataset = {"name": "fashion_mnist", "limit": 1000, "validation_split": 0.1}
        job = submit_job(http, dataset=dataset, training={"epochs": 2})
        done = wait_for_status(http, job["id"], {"succeeded", "failed"})
    assert done["status"] == "succeeded", done.get("error")
    page.goto(f"{service.url}/ui")
    expect(page.get_by_test_id("key-help")).to_contain_text(".epochal/api-key")
    page.get_by_test_id("api-key").fill(service.api_key)
    page.get_by_test_id("login").click()
    expect(page.get_by_test_id("jobs")).to_be_visible()
    page.goto(f"{service.url}/ui#/jobs/{job['id']}")
    expect(page.get_by_test_id("heatmap")).to_be_visible()
    cells = page.get_by_test_id("heatmap-cell")
    expect(cells).to_have_count(10 * 10)  # classes², rows true, columns predicted
    matrix = done["result"]["evaluation"]["confusion_matrix"]
    shown = [int(text or 0) for text in cells.all_inner_texts()]
    assert shown == [count for row in matrix for count in row]
    expect(page.get_by_test_id("per-class").locator("tbody tr")).to_have_count(10)
    names = list(CLASS_NAMES["fashion_mnist"])
    assert page.get_by_test_id("heatmap-label").all_inner_texts() == names
    rows = page.get_by_test_id("per-class").locator("tbody tr td:first-child").all_inner_texts()
    assert rows == names
    expect(page.get_by_test_id("download-onnx")).to_be_visible()
    # Whole numbers as integers, nested results as dotted keys, the best epoch with its metric.
    result = done["result"]
    expect(page.locator("[data-result=best_epoch]")).to_have_text(str(result["best_epoch"]))
    expect(page.locator("[data-result=replicas]")).to_have_text("1")
    expect(page.locator("[data-result='export.onnx.opset']")).to_have_text("17")
    assert page.locator("[data-result=timings]").count() == 0
    assert page.locator("[data-result^='timings.']").count() >= 2
    assert not [t for t in page.locator("dl.facts dd").all_inner_texts() if t.startswith("{")]
    best = f"val_loss {done['best_metric']:.4f} @ epoch {done['best_epoch']}"
    expect(page.get_by_test_id("best")).to_have_text(best)
    page.goto(f"{service.url}/ui#/")
    expect(page.locator(f"[data-job='{job['id']}'] [data-testid=job-best]")).to_have_text(best)
    page.goto(f"{service.url}/ui#/jobs/{job['id']}")
    expect(page.get_by_test_id("heatmap")).to_be_visible()
    page.screenshot(path=str(SHOTS / "dashboard-evaluation.png"), full_page=True)
    assert page.errors == []


def test_a_jobs_page_moves_by_steps_within_the_first_epoch(service: Service, page: Any) -> None:
    from playwright.sync_api import expect

    with service.client() as http:
        # ~90,000 steps an epoch: the first lasts for many step reports
        dataset = {"name": "synthetic", "samples": 200_000}
        job = submit_job(http, dataset=dataset, training={"epochs": 2, "batch_size": 2})
    page.goto(f"{service.url}/ui")
    page.get_by_test_id("api-key").fill(service.api_key)
    page.get_by_test_id("login").click()
    expect(page.get_by_test_id("jobs")).to_be_visible()
    page.goto(f"{service.url}/ui#/jobs/{job['id']}")
    steps = page.get_by_test_id("steps")
    within = re.compile(r"epoch 1: step (\d+)/(\d+)")
    expect(steps).to_have_text(within, timeout=scaled(120) * 1000)
    first = steps.inner_text()
    expect(steps).not_to_have_text(first, timeout=scaled(30) * 1000)  # it moves by itself
    match = within.search(steps.inner_text())
    assert match and int(match[1]) < int(match[2])  # still the first epoch
    with service.client() as http:
        http.post(f"/v1/jobs/{job['id']}/cancel")
        assert wait_for_status(http, job["id"], {"cancelled"}, timeout=60)["status"] == "cancelled"
    expect(steps).to_have_text("")  # an ended job has no epoch in progress
    assert page.errors == []


def test_the_queue_view_and_a_queued_jobs_page_show_position_reason_and_eta(
    service: Service, page: Any
) -> None:
    from playwright.sync_api import expect

    long = {"dataset": {"name": "synthetic", "samples": 4000}, "training": {"epochs": 1000}}
    with service.client() as http:
        running = submit_job(http, **long)["id"]
        wait_until(lambda: http.get(f"/v1/jobs/{running}").json()["current_epoch"] >= 1, 120,
                   "the running job's first epoch")  # fmt: skip
        queued = submit_job(http, name="waiting-job", dataset={"name": "digits"})["id"]
    page.goto(f"{service.url}/ui")
    page.get_by_test_id("api-key").fill(service.api_key)
    page.get_by_test_id("login").click()
    expect(page.get_by_test_id("jobs")).to_be_visible()
    page.get_by_test_id("nav-queue").click()
    row = page.locator(f"[data-queued='{queued}']")
    expect(row).to_contain_text("waiting-job")
    expect(row.get_by_test_id("queue-position")).to_have_text("1")
    expect(row.get_by_test_id("queue-reason")).to_have_text(
        "next to run: every worker that fits is busy"
    )
    expect(row.get_by_test_id("queue-eta")).to_contain_text("starts in ~")
    expect(page.get_by_test_id("queue-summary")).to_contain_text("1 queued in all")
    page.screenshot(path=str(SHOTS / "dashboard-queue.png"), full_page=True)
    row.get_by_role("link", name="waiting-job").click()
    expect(page.get_by_test_id("queue")).to_contain_text("#1, starts in ~")
    expect(page.get_by_test_id("queue")).to_contain_text("every worker that fits is busy")
    with service.client() as http:
        for job_id in (queued, running):
            http.post(f"/v1/jobs/{job_id}/cancel")
    expect(page.get_by_test_id("status")).to_have_text("cancelled")
    expect(page.get_by_test_id("queue")).to_have_count(0)
    assert page.errors == []
