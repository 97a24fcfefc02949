"""Data sets as immutable, indexed shards in the store: bigger than memory, read in pieces.

layout (one shard's bytes: a .npy of fixed-size records) <- index (index.json: shards, rows,
checksums, schema, classes, the version) <- writer (samples in, shards and index out) and
cache (whole shards in memory, bounded in bytes, checked on arrival) <- reader (samples by
global id); order (each epoch's order and every rank's batches, a pure function); ingest (the
files of each format, one module each, into shards). Nothing here imports the web layer, the
database or a framework: the API reads an index, a CPU task writes one, the training process
streams it (worker.training.data.stream).
"""

from app.shards.index import IndexMissing, ShardEntry, ShardIndex, dataset_prefix, read_index
from app.shards.layout import Schema, ShardError
from app.shards.order import EpochOrder, OrderPlan
from app.shards.reader import ShardReader
from app.shards.writer import ShardWriter, write_shards

__all__ = [
    "EpochOrder",
    "IndexMissing",
    "OrderPlan",
    "Schema",
    "ShardEntry",
    "ShardError",
    "ShardIndex",
    "ShardReader",
    "ShardWriter",
    "dataset_prefix",
    "read_index",
    "write_shards",
]
