"""A streamed job whose input is its bottleneck says so, once: the first epoch that waited for
input (data_wait_seconds) more than INPUT_BOUND of its wall time, and at least MIN_WAIT_SECONDS,
gives the job's result a warning naming the epoch, the share and what to change. The floor
keeps quiet about tiny epochs, whose few milliseconds of steps the reader's own per-batch work
can outlast although nothing is fetched. The warning is callback state, so a resumed attempt
keeps it and never gives a second one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.schemas.metric_row import EPOCH_SECONDS
from worker.training.callbacks import Callback, Logs, TrainState

INPUT_BOUND = 0.2  # the share of an epoch's wall time spent waiting for input that is too much
MIN_WAIT_SECONDS = 1.0  # and the least wait worth a warning
MB = 1024 * 1024


class InputBottleneck(Callback):
    """Watches each epoch's input wait against its wall time (an in-memory epoch has none)."""

    state_key = "input_bottleneck"

    def __init__(self) -> None:
        self.warning: str | None = None

    def on_epoch_end(self, state: TrainState, logs: Logs) -> None:
        wait, seconds = logs.get("data_wait_seconds"), logs.get(EPOCH_SECONDS)
        if self.warning is not None or wait is None or not seconds:
            return
        if wait > INPUT_BOUND * seconds and wait >= MIN_WAIT_SECONDS:
            self.warning = bottleneck_warning(state.epoch, wait, seconds, logs)

    def state_dict(self) -> dict[str, Any]:
        return {"warning": self.warning}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.warning = state.get("warning")

    @property
    def warnings(self) -> list[str]:
        return [] if self.warning is None else [self.warning]


def bottleneck_warning(epoch: int, wait: float, seconds: float, logs: Logs) -> str:
    """The warning for `epoch`, which waited `wait` of its `seconds` for input: what its cache
    did, and what to change (the store's side when shards were fetched, else the reader's)."""
    hits, misses = logs.get("data_cache_hits"), logs.get("data_cache_misses")
    read = logs.get("data_read_bytes")
    cache, fetched = "", True
    if hits is not None and misses is not None and read is not None:
        cache = (
            f"; its shard cache served {hits:.0f} shard uses and fetched {misses:.0f} "
            f"({read / MB:.1f} MiB read from the store)"
        )
        fetched = misses > 0
    advice = (
        "Give the reader more memory (dataset.stream_ram_mb, up to the worker's "
        "EPOCHAL_STREAM_RAM_BYTES) so the shards stay cached from one epoch to the next, write "
        "the data set in larger shards so each fetch carries more samples, or keep it in a "
        "faster store"
        if fetched
        else "Every shard was already in memory, so the store is not the cause: the reader's "
        "own work per batch (assembling it, dataset.augment) outlasts the steps; a larger "
        "training.batch_size gives each step more to do per batch"
    )
    return (
        f"input is the bottleneck: epoch {epoch} waited for its data {wait:.2f} s of its "
        f"{seconds:.2f} s ({wait / seconds:.0%}, more than {INPUT_BOUND:.0%}){cache}. {advice}"
    )
