"""DDP plumbing: process group, model wrapping and the cross-rank reductions the loop needs.

One process per replica (started by worker.child.launch, never by the Celery process); gloo on
CPU, NCCL on GPUs; rendezvous through a file in the job's directory, so jobs never fight over ports,
or for a multi-node job at the tcp:// address and port rank 0's worker published, through the
gang's own store (worker.training.torch.gang_store): only a holder of the attempt's secret may
read or write it, so only the gang's seats join the group.
"""

from __future__ import annotations

import os
from datetime import timedelta
from urllib.parse import urlsplit

import torch
import torch.distributed as dist
from torch import nn

from worker.protocol import DDP_INIT_ENV, GANG_SECRET_ENV
from worker.training.backend import Placement
from worker.training.torch import gang_store

_SERVED: list[gang_store.StoreServer] = []  # rank 0's store, for as long as the process lives


def setup(placement: Placement) -> None:
    """Join the job's process group (no-op for a single replica)."""
    if placement.replicas == 1 or dist.is_initialized():
        return
    backend = "nccl" if placement.gpus else "gloo"
    if placement.gpus:
        torch.cuda.set_device(placement.gpus[0])
    # A stuck collective (a rank gone, a node stalled) fails the job instead of hanging.
    timeout = timedelta(seconds=placement.timeout_seconds)
    init = os.environ[DDP_INIT_ENV]
    if not init.startswith("tcp://"):  # one node: a file in the job's own directory
        dist.init_process_group(
            backend,
            init_method=init,
            rank=placement.rank,
            world_size=placement.replicas,
            timeout=timeout,
        )
        return
    store = gang_rendezvous(init, os.environ.get(GANG_SECRET_ENV, ""), placement.rank, timeout)
    dist.init_process_group(
        backend, store=store, rank=placement.rank, world_size=placement.replicas, timeout=timeout
    )


def gang_rendezvous(init: str, secret: str, rank: int, timeout: timedelta) -> dist.Store:
    """The gang's store at `init` (tcp://HOST:PORT), served by global rank 0; every rank
    joins it with the attempt's secret, which a gang's node is never started without."""
    if not secret:
        raise RuntimeError(f"a gang's rendezvous needs the attempt's secret ({GANG_SECRET_ENV})")
    where = urlsplit(init)
    address, port = str(where.hostname), int(where.port or 0)
    if rank == 0 and not _SERVED:
        _SERVED.append(gang_store.StoreServer(gang_store.listen(address, port), secret.encode()))
        _SERVED[0].start()
    return gang_store.GangStore(address, port, secret.encode(), timeout)


def wrap(model: nn.Module, placement: Placement) -> nn.Module:
    if placement.replicas == 1:
        return model
    setup(placement)
    device_ids = placement.gpus[:1] or None
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


def world_size(placement: Placement) -> int:
    """Ranks in the job's process group, as torch.distributed counts them (1 without one)."""
    if placement.replicas == 1 or not dist.is_initialized():
        return 1
    return int(dist.get_world_size())


def max_all(value: int, placement: Placement) -> int:
    """The largest value over ranks, on every rank (all_reduce MAX), Lightning-style."""
    if placement.replicas == 1:
        return value
    device = torch.device(f"cuda:{placement.gpus[0]}") if placement.gpus else torch.device("cpu")
    tensor = torch.tensor([value], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def sum_all(tensor: torch.Tensor, placement: Placement) -> torch.Tensor:
    """Sum a tensor over ranks (sums of losses and counts, never means, P29)."""
    if placement.replicas > 1:
        tensor = tensor.clone()
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def shutdown(placement: Placement) -> None:
    """Leave the group together: gloo aborts the process ("terminate called without an active
    exception") when one rank tears its group down while another still uses it."""
    if placement.replicas == 1 or not dist.is_initialized():
        return
    try:
        dist.barrier()
    except RuntimeError:  # a rank is gone; the launcher already stops the job
        pass
    dist.destroy_process_group()
