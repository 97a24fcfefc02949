"""PyTorch on a streamed data set: this rank's batches from a ShardStream, one step each.

Rank r of the DDP group reads slice r of every global batch (app.shards.order), so each sample
is trained on once per epoch over all ranks and every rank runs the same number of steps.
Dropout draws from a generator seeded by (seed, epoch, step, rank) at every step, so an epoch
resumed at any step draws what an uninterrupted one draws, whatever the rank count. A
mid-epoch checkpoint holds the next batch's position and the epoch's per-step losses and
metric sum so far (summed over ranks; rank 0 carries them on): the resumed epoch's loss is
the uninterrupted one's.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from typing import Any, Protocol

import numpy as np
import torch

from app.schemas.job_spec import JobSpec
from worker.training.backend import Backend, Placement, TrainedEpoch
from worker.training.callbacks import Logs, TrainState
from worker.training.data.stream import Batch, Position, ShardStream, input_counts
from worker.training.data.streamed import prepare_batch, step_seed
from worker.training.data.types import StreamSource
from worker.training.loop import agree_on_interrupt
from worker.training.torch import distributed

CHECK_EVERY = 32


class TorchSteps(Backend, Protocol):
    """What a streamed epoch uses of worker.training.torch.backend.TorchBackend (which
    imports this module, so it names the class's members rather than the class)."""

    spec: JobSpec
    placement: Placement
    device: torch.device
    classify: bool
    net: torch.nn.Module

    @property
    def model(self) -> torch.nn.Module: ...

    def _autocast(self) -> AbstractContextManager[None]: ...
    def _losses(
        self, out: torch.Tensor, y: torch.Tensor, reduction: str
    ) -> tuple[torch.Tensor, torch.Tensor]: ...
    def _step(self, xb: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...
    def _first_bad_step(self, step_losses: torch.Tensor, begin: int, end: int) -> int | None: ...
    def _bad_epoch(self, bad_step: int, step_losses: torch.Tensor) -> TrainedEpoch: ...
    def agree(self, value: int) -> int: ...


class StreamedTorch:
    """The streamed epoch and evaluation of one TorchBackend."""

    def __init__(self, backend: TorchSteps, data: StreamSource) -> None:
        self.backend, self.data = backend, data
        placement = backend.placement
        self.rank, self.world = placement.rank, placement.replicas
        self._stream: ShardStream | None = None

    @property
    def stream(self) -> ShardStream:
        if self._stream is None:  # opened at the first epoch: a resumed job may have none left
            self._stream = self.data.train_stream(self.world, self.rank, self.world)
        return self._stream

    def _tensors(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        device, pin = self.backend.device, self.backend.device.type == "cuda"
        x = torch.from_numpy(prepare_batch(batch, self.data))
        y = torch.from_numpy(batch.y.astype(np.int64 if self.backend.classify else np.float32))
        if pin:  # copied while the device still runs the previous step
            x, y = x.pin_memory(), y.pin_memory()
        return x.to(device, non_blocking=pin), y.to(device, non_blocking=pin)

    def train_epoch(self, state: TrainState) -> TrainedEpoch | None:
        b, stream = self.backend, self.stream
        losses = torch.zeros(stream.batches_per_epoch, device=b.device)
        sums = torch.zeros(2, device=b.device)  # metric sum, samples
        start = self._resume(state, losses, sums)
        earlier = float(sums[1]) if start else 0.0  # samples of a resumed epoch before it
        before = stream.stats
        b.net.train()
        ran = self._steps(state, start, losses, sums)
        if ran is None or isinstance(ran, TrainedEpoch):  # interrupted, or a non-finite loss
            return ran
        bad = b._first_bad_step(losses, ran, stream.batches_per_epoch)
        if bad is not None:
            return b._bad_epoch(bad, losses)
        totals = distributed.sum_all(torch.cat([losses.sum()[None], sums]), b.placement)
        samples = int(totals[2].item())
        name = "accuracy" if b.classify else "mae"
        now = stream.stats
        wait = b.agree(round((now.wait_seconds - before.wait_seconds) * 1e6)) / 1e6
        counts = torch.tensor(input_counts(now, before), dtype=torch.int64, device=b.device)
        read, hits, misses = distributed.sum_all(counts, b.placement).tolist()
        return TrainedEpoch(
            logs={"loss": totals[0].item() / samples, name: totals[1].item() / samples},
            samples=samples,
            data_wait_seconds=wait,
            data_read_bytes=read,
            data_cache_hits=hits,
            data_cache_misses=misses,
            trained_samples=round(samples - b.agree(round(earlier))) if start else None,
        )

    def _steps(
        self, state: TrainState, start: int, losses: torch.Tensor, sums: torch.Tensor
    ) -> int | TrainedEpoch | None:
        """The epoch's steps from `start`: None when an interrupt stopped them (after a
        mid-epoch checkpoint where the attempt can go on), the bad epoch when a loss was not
        finite, else the first step whose loss is still to be checked."""
        b, epoch, steps = self.backend, state.epoch, self.stream.batches_per_epoch
        checked, last = start, None
        for batch in self.stream.iterate(Position(epoch, start), epoch + 1):
            step = batch.index
            if step % CHECK_EVERY == 0 and step > start:
                if agree_on_interrupt(b, state):
                    if state.step_checkpoint is not None and last is not None:
                        state.step_checkpoint(state, self._mid(last, losses, sums), True)
                    return None
                bad = b._first_bad_step(losses, checked, step)
                if bad is not None:
                    return b._bad_epoch(bad, losses)
                checked = step
            torch.manual_seed(step_seed(b.spec.training.seed, epoch, step, self.rank))
            loss, metric = b._step(*self._tensors(batch))
            losses[step] = loss * len(batch.ids)
            sums += torch.stack(
                [metric.float(), torch.tensor(float(len(batch.ids)), device=b.device)]
            )
            state.global_step += 1
            state.steps_done(step + 1, steps)
            if state.step_checkpoint is not None and step + 1 < steps:
                state.step_checkpoint(state, self._mid(batch, losses, sums), False)
            last = batch
        return checked

    def _mid(
        self, batch: Batch, losses: torch.Tensor, sums: torch.Tensor
    ) -> Callable[[], dict[str, Any]]:
        return partial(self._mid_epoch, batch, losses, sums)

    def _resume(self, state: TrainState, losses: torch.Tensor, sums: torch.Tensor) -> int:
        """Where this epoch starts: 0, or after a mid-epoch checkpoint's last step (its sums
        go to rank 0, which adds them once)."""
        saved, state.mid_epoch = state.mid_epoch, None
        if saved is None:
            return 0
        position = Position.from_json(saved["position"])
        if position.epoch != state.epoch:
            raise RuntimeError(f"a checkpoint of epoch {position.epoch + 1} for {state.epoch + 1}")
        if self.rank == 0:
            done = torch.tensor(saved["losses"], dtype=torch.float32)
            losses[: len(done)] = done.to(losses.device)
            sums += torch.tensor([saved["metric"], saved["samples"]], device=sums.device)
        return position.batch

    def _mid_epoch(self, batch: Batch, losses: torch.Tensor, sums: torch.Tensor) -> dict[str, Any]:
        placement = self.backend.placement
        done = distributed.sum_all(losses[: batch.index + 1], placement).cpu()
        metric, samples = distributed.sum_all(sums, placement).cpu().tolist()
        return {
            "position": batch.next_position.to_json(),
            "losses": done.tolist(),
            "metric": metric,
            "samples": samples,
        }

    @torch.inference_mode()
    def evaluate(self, split: str) -> Logs:
        b = self.backend
        b.net.eval()
        totals = torch.zeros(2, device=b.device)
        for x, y in self.data.chunks(split, self.rank, self.world):
            xb = torch.from_numpy(x).to(b.device)
            yb = torch.from_numpy(y.astype(np.int64 if b.classify else np.float32)).to(b.device)
            with b._autocast():
                loss_sum, metric_sum = b._losses(b.model(xb), yb, "sum")
            totals += torch.stack([loss_sum.float(), metric_sum.float()])
        totals = distributed.sum_all(totals, b.placement)
        rows = self.data.parts[split].rows
        name = "accuracy" if b.classify else "mae"
        return {"loss": totals[0].item() / rows, name: totals[1].item() / rows}

    def end_training(self) -> None:
        """Close the training stream, its cached shards with it (none opened: nothing to
        do); the next epoch, if any, opens a new one."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def close(self) -> None:
        self.end_training()
        self.data.close()
