"""Run one training case in this (fresh) process and print its result as JSON.

`python -m benchmarks.training.cases NAME EPOCHS`: each case gets its own process, so the two
frameworks never share thread pools or memory and every run starts cold, as a job's child does.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.training import seeds  # noqa: E402
from benchmarks.training.common import EpochTimes, engine, seed_equivalent_spec  # noqa: E402

CASES: dict[str, Callable[[int], EpochTimes]] = {
    "pytorch_seed": seeds.pytorch_seed,
    "pytorch_engine": lambda epochs: engine(seed_equivalent_spec("pytorch", epochs)),
    "tensorflow_seed": seeds.tensorflow_seed,
    "tensorflow_engine": lambda epochs: engine(seed_equivalent_spec("tensorflow", epochs)),
    "keras_fit": seeds.keras_fit,
}

if __name__ == "__main__":
    name, epochs = sys.argv[1], int(sys.argv[2])
    result = CASES[name](epochs)
    print("RESULT " + json.dumps(result.to_json()), flush=True)
