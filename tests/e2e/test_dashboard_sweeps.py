"""The dashboard's sweep page in a real headless browser against a live service: a pruning
sweep's trials table, every trial's curve overlaid (pruned ones ending where they stopped),
the objective against the parameter; a screenshot for people under test-artifacts/."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.test_dashboard import SHOTS, page, service  # noqa: F401 (fixtures)
from tests.e2e.test_sweeps import pruning_sweep, submit_sweep, wait_for_sweep
from tests.helpers import Service

pytestmark = pytest.mark.e2e


def curve_points(page: Any) -> list[int]:  # noqa: F811
    paths = page.locator("[data-testid=curves-chart] path[data-series]")
    return sorted(int(paths.nth(i).get_attribute("data-points") or 0) for i in range(paths.count()))


def test_sweep_page_shows_trials_curves_and_parameters(service: Service, page: Any) -> None:  # noqa: F811
    from playwright.sync_api import expect

    with service.client() as http:
        sweep_id = submit_sweep(http, pruning_sweep("pytorch"))
        sweep = wait_for_sweep(http, sweep_id)
    assert [t["state"] for t in sweep["trials"]] == ["complete", "pruned", "pruned"]

    page.goto(f"{service.url}/ui")
    page.get_by_test_id("api-key").fill(service.api_key)
    page.get_by_test_id("login").click()
    page.get_by_test_id("nav-sweeps").click()
    row = page.locator(f"[data-sweep='{sweep_id}']")
    expect(row).to_contain_text("prune-pytorch")
    expect(row).to_contain_text("succeeded")
    metric, best = sweep["objective"]["metric"], sweep["best"]["objective"]
    expect(row.get_by_test_id("sweep-best")).to_have_text(f"{metric} {best:.4f}")
    with service.client() as http:
        (listed,) = [s for s in http.get("/v1/sweeps").json()["items"] if s["id"] == sweep_id]
    assert listed["best_objective"] == best  # the list's column: the best complete trial's
    row.get_by_role("link").click()

    states = page.get_by_test_id("trials").get_by_test_id("trial-state")
    expect(states).to_have_text(["complete", "pruned", "pruned"])
    expect(page.get_by_test_id("epochs")).to_contain_text("9 trained of 15")
    expect(page.get_by_test_id("best")).to_contain_text("#0")
    # A locator, not wait_for_function: the page's CSP forbids the eval that polling a string needs.
    expect(page.locator("[data-testid=curves-chart] path[data-series]")).to_have_count(3)
    assert curve_points(page) == [2, 2, 5]  # pruned curves end at the epoch they stopped
    chart = page.locator("[data-testid=param-chart][data-parameter='optimizer.learning_rate']")
    expect(chart).to_contain_text("against optimizer.learning_rate")
    assert chart.locator("circle").count() == 3
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "dashboard-sweep.png"), full_page=True)
    assert page.errors == []
