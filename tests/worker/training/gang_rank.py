"""`python -m tests.worker.training.gang_rank RANK WORLD INIT_URL FOLDER`

One rank of a gang's process group, joined the way a gang's training process joins it
(worker.training.torch.distributed.setup, its secret from EPOCHAL_GANG_SECRET). It writes
FOLDER/joined-RANK once in the group, waits for FOLDER/go, then agrees on the largest of the
ranks' numbers with pickle turned off (torch.distributed's object collectives pickle) and writes
what it got to FOLDER/got-RANK.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from worker.protocol import DDP_INIT_ENV
from worker.training.backend import Placement
from worker.training.torch import distributed

OFFSET = 40  # rank r brings OFFSET + r: every rank gets OFFSET + the last rank


def no_pickle(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("pickle was used between the gang's nodes")


def main(rank: int, world: int, init: str, folder: Path) -> None:
    os.environ[DDP_INIT_ENV] = init
    placement = Placement(replicas=world, rank=rank, threads=1, timeout_seconds=120)
    distributed.setup(placement)
    (folder / f"joined-{rank}").touch()
    while not (folder / "go").exists():
        time.sleep(0.1)
    # Every object collective goes through these two (pickle.Pickler and Unpickler).
    c10d._object_to_tensor = c10d._tensor_to_object = no_pickle
    dist.broadcast_object_list = no_pickle
    got = distributed.max_all(OFFSET + rank, placement)
    (folder / f"got-{rank}").write_text(str(got))
    distributed.shutdown(placement)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))
