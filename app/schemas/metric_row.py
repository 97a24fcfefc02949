"""The metrics row, one per epoch: its fields, named once (pure stdlib).

A back-end reports its SCORES for a pass over a split (the epoch's training pass, a validation
pass); the training loop names each one `score_field(split, score)`, so the training loss is
`train_loss` from the loop through the table and the API to the client, and adds the epoch's
own measures. The table's columns, the API's MetricRow, the sink, the live events and the
sweep objectives take their fields from here; the client, which cannot import the server,
mirrors ROW_FIELDS in epochal_client.types.MetricRow (tests/client/test_client_unit.py holds
them equal).
"""

from __future__ import annotations

SPLITS = ("train", "val")  # the passes of an epoch that are scored
SCORES = ("loss", "accuracy", "mae")  # what a back-end reports for a pass (loss incl. L2)
EPOCH_SECONDS = "epoch_seconds"  # how long the epoch took (the scheduler's ETA reads it)
# A streamed epoch's input (null for data held in memory, which neither waits nor reads):
# data_wait_seconds, its training pass's time blocked on input, the largest over ranks; then
# what that pass's shard caches did, summed over ranks: bytes read from the store, and shard
# uses served from the cache (hits) or by a fetch from the store (misses).
INPUT_MEASURES = ("data_wait_seconds", "data_read_bytes", "data_cache_hits", "data_cache_misses")
EPOCH_MEASURES = ("learning_rate", EPOCH_SECONDS, "samples_per_second", *INPUT_MEASURES)


def score_field(split: str, score: str) -> str:
    """The name of a split's score: `train_loss`, `val_accuracy` (a row's), `test_mae`."""
    return f"{split}_{score}"


SCORE_FIELDS = tuple(score_field(split, score) for split in SPLITS for score in SCORES)
# The nullable float columns of a row, in the order the API serves them.
METRIC_FIELDS = (*SCORE_FIELDS, *EPOCH_MEASURES)
# A row as the API serves it: its epoch, then its values.
ROW_FIELDS = ("epoch", *METRIC_FIELDS)


def monitored(monitor: str) -> str:
    """The row field a spec's monitor watches: the spec names a training score bare, as Keras
    does (`loss`, `accuracy`), and a validation one by its field (`val_loss`)."""
    return score_field("train", monitor) if monitor in SCORES else monitor


def best_field(monitor: str | None, validates: bool) -> str:
    """The row field a job's best epoch is chosen by: early stopping's monitor when it has one,
    else the validation loss (the training loss without a validation split)."""
    if monitor is not None:
        return monitored(monitor)
    return score_field("val" if validates else "train", "loss")
