"""Data sets as numpy arrays: built-ins, synthetic and uploads; split and normalized by spec.

types (what the modules hand each other) <- idx (IDX files) <- download <- builtin; uploads;
splits (split, normalize, epoch order); load (a job's splits from its spec); stream (one rank's
batches of a sharded data set, app.shards, from a position). This package re-exports what
back-ends and the attempt use; nothing in it imports the package itself.
"""

from worker.training.data.load import load_raw, load_splits
from worker.training.data.splits import epoch_order, epoch_seed, global_steps
from worker.training.data.types import DataError, RawData, Splits

__all__ = [
    "DataError",
    "RawData",
    "Splits",
    "epoch_order",
    "epoch_seed",
    "global_steps",
    "load_raw",
    "load_splits",
]
