"""Prometheus series of the store's state, from this API process's last probe
(app.storage.health; a scrape probes at most once per PROBE_EVERY_SECONDS)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.storage.health import StoreStatus, store_watch

STATES: tuple[StoreStatus, ...] = ("ok", "unavailable", "error", "unknown")


class StoreCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        state = store_watch().refresh()
        up = GaugeMetricFamily(
            "epochal_store_up", "1 when the store answered its last probe, else 0"
        )
        up.add_metric([], 1.0 if state.status == "ok" else 0.0)
        yield up
        status = GaugeMetricFamily(
            "epochal_store_state",
            "the store's state at its last probe (1 for the one it is)",
            labels=["state"],
        )
        for name in STATES:
            status.add_metric([name], 1.0 if state.status == name else 0.0)
        yield status
        seconds = GaugeMetricFamily(
            "epochal_store_probe_seconds", "how long the store's last probe took"
        )
        seconds.add_metric([], state.seconds)
        yield seconds
