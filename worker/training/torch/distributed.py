"""DDP plumbing: process group, model wrapping and the cross-rank reductions the loop needs.

One process per replica (started by worker.child.launch, never by the Celery process); gloo on
CPU, NCCL on GPUs; rendezvous through a file in the job's directory, so jobs never fight over ports,
or for a multi-node job at the tcp:// address and fresh port rank 0's worker published.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from worker.protocol import DDP_INIT_ENV
from worker.training.backend import Placement


def setup(placement: Placement) -> None:
    """Join the job's process group (no-op for a single replica)."""
    if placement.replicas == 1 or dist.is_initialized():
        return
    backend = "nccl" if placement.gpus else "gloo"
    if placement.gpus:
        torch.cuda.set_device(placement.gpus[0])
    dist.init_process_group(
        backend,
        init_method=os.environ[DDP_INIT_ENV],
        rank=placement.rank,
        world_size=placement.replicas,
        # A stuck collective (a rank gone, a node stalled) fails the job instead of hanging.
        timeout=timedelta(seconds=placement.timeout_seconds),
    )


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


def broadcast_bytes(payload: bytes, source: int, placement: Placement) -> bytes:
    """Rank `source`'s bytes on every rank (pickled by torch.distributed, over the group)."""
    if placement.replicas == 1:
        return payload
    box: list[bytes] = [payload]
    dist.broadcast_object_list(box, src=source)
    return box[0]


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
