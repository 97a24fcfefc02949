"""PyTorch back-end: the data set lives as tensors on the device, batches are index gathers.

A DataLoader over per-sample transforms (the seed) spends most of its time in Python; here one
epoch is a permutation and `index_select`s, the loss and accuracy accumulate on the device, and
the host syncs only every CHECK_EVERY steps (to notice a cancel or a non-finite loss).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from app.domain.job_files import MODEL_FILES
from app.schemas.dataset_spec import model_input
from app.schemas.job_spec import JobSpec
from app.schemas.spec_graph import built_model
from worker.training.backend import Placement, TrainedEpoch
from worker.training.callbacks import Logs, TrainState
from worker.training.data import Splits, epoch_order, epoch_seed, global_steps
from worker.training.init import initial_weights
from worker.training.loop import agree_on_interrupt
from worker.training.torch import distributed
from worker.training.torch.graph import KIT, GraphModule, parameter_groups
from worker.training.torch.streamed import StreamedTorch

CHECK_EVERY = 32
EVAL_BATCH = 8192


@contextlib.contextmanager
def strict_fp32() -> Iterator[None]:
    """Full float32 matmuls and convolutions on a GPU (cuDNN's default is TF32), for a while."""
    cuda, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = cuda.allow_tf32, cudnn.allow_tf32
    cuda.allow_tf32 = cudnn.allow_tf32 = False
    try:
        yield
    finally:
        cuda.allow_tf32, cudnn.allow_tf32 = saved


class TorchBackend:
    """Implements worker.training.backend.Backend for PyTorch (single device or DDP)."""

    def __init__(self, spec: JobSpec, splits: Splits, placement: Placement) -> None:
        torch.manual_seed(spec.training.seed)
        use_threads(placement)
        self.spec, self.placement, self.is_main = spec, placement, placement.is_main
        self.device = torch.device(f"cuda:{placement.gpus[0]}" if placement.gpus else "cpu")
        self.classify = spec.task == "classification"
        x = model_input(spec, splits.input_shape, splits.tokens, splits.vocab)
        graph = built_model(spec, x, splits.outputs)
        self.model = GraphModule(graph).to(self.device)
        self.variables = self.model.variables()
        self.kernels = [
            t for t, v in zip(self.variables, graph.variables(), strict=True) if v.decays
        ]
        self.set_weights(initial_weights(graph.variables(), spec.training.seed))
        self.net: nn.Module = distributed.wrap(self.model, placement)
        # A parameter group per lr_multiplier; set_learning_rate keeps each at rate x its own.
        groups = parameter_groups(self.variables, graph.variables())
        self.lr_multipliers = [multiplier for multiplier, _ in groups]
        rate = spec.optimizer.learning_rate
        self.optimizer: torch.optim.Optimizer = spec.optimizer.torch_optimizer(
            KIT, [{"params": params, "lr": rate * m} for m, params in groups]
        )
        self.scaler = torch.amp.GradScaler("cuda") if spec.resources.precision == "fp16" else None
        self.data = {
            split: (self._tensor_x(x), self._tensor_y(y))
            for split, x, y in (
                ("train", splits.x_train, splits.y_train),
                ("val", splits.x_val, splits.y_val),
                ("test", splits.x_test, splits.y_test),
            )
            if x is not None and y is not None
        }
        self.streamed = StreamedTorch(self, splits.stream) if splits.stream else None

    def _tensor_x(self, x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(x).to(self.device)  # the graph takes samples as stored

    def _tensor_y(self, y: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(y.astype(np.int64 if self.classify else np.float32)).to(self.device)

    @contextlib.contextmanager
    def _autocast(self) -> Iterator[None]:
        precision = self.spec.resources.precision
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        with torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None):
            yield

    def set_learning_rate(self, rate: float) -> None:
        for group, multiplier in zip(self.optimizer.param_groups, self.lr_multipliers, strict=True):
            group["lr"] = rate * multiplier

    def _losses(
        self, out: torch.Tensor, y: torch.Tensor, reduction: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(data loss, metric sum): CE from logits and correct count, or MSE and abs error."""
        out = out.float()
        if self.classify:
            return F.cross_entropy(out, y, reduction=reduction), (out.argmax(1) == y).sum()
        pred = out.squeeze(-1)
        return F.mse_loss(pred, y, reduction=reduction), (pred - y).abs().sum()

    def l2_term(self) -> torch.Tensor:
        """l2 * sum(w**2) over kernels; added to the loss, not folded into weight decay."""
        return (
            self.spec.regularization.l2 * torch.stack([k.pow(2).sum() for k in self.kernels]).sum()
        )

    def train_epoch(self, state: TrainState) -> TrainedEpoch | None:
        if self.streamed is not None:
            return self.streamed.train_epoch(state)
        x, y = self.data["train"]
        replicas, rank = self.placement.replicas, self.placement.rank
        batch, seed = self.spec.training.batch_size, self.spec.training.seed
        local = batch // replicas
        steps = global_steps(len(x), batch, replicas)
        order = torch.from_numpy(
            epoch_order(len(x), seed, state.epoch, self.spec.training.shuffle)
        ).to(self.device)
        # Dropout draws from a generator seeded by (seed, epoch, rank): a resumed attempt
        # replays the epoch exactly, and each DDP rank draws its own masks.
        torch.manual_seed(epoch_seed(seed, state.epoch, rank))
        step_losses = torch.zeros(steps, device=self.device)
        metric_sum = torch.zeros((), device=self.device)
        self.net.train()
        seen, checked = 0, 0
        for step in range(steps):
            if step % CHECK_EVERY == 0 and step:  # a host sync: only every CHECK_EVERY steps
                if agree_on_interrupt(self, state):
                    return None
                bad = self._first_bad_step(step_losses, checked, step)
                if bad is not None:
                    return self._bad_epoch(bad, step_losses)
                checked = step
            # Rank r takes its slice of global batch `step`: every replica count sees the
            # same global batches, so 1 and N replicas take the same optimizer steps.
            start = step * batch + rank * local
            idx = order[start : min(start + local, len(x))]
            loss, metric = self._step(x.index_select(0, idx), y.index_select(0, idx))
            step_losses[step] = loss * len(idx)
            metric_sum += metric
            seen += len(idx)
            state.steps_done(step + 1, steps)  # on a GPU: queued, within CHECK_EVERY of done
        state.global_step += steps
        bad = self._first_bad_step(step_losses, checked, steps)
        if bad is not None:
            return self._bad_epoch(bad, step_losses)
        totals = distributed.sum_all(torch.stack([step_losses.sum(), metric_sum]), self.placement)
        samples = seen * replicas
        name = "accuracy" if self.classify else "mae"
        return TrainedEpoch(
            logs={"loss": totals[0].item() / samples, name: totals[1].item() / samples},
            samples=samples,
        )

    def end_training(self) -> None:
        if self.streamed is not None:
            self.streamed.end_training()

    def _step(self, xb: torch.Tensor, yb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step on this rank's batch: (objective, metric sum), both detached.

        The loss is the mean over the local batch: DDP averages gradients over ranks, so with
        equal local batches that is the gradient of the global mean (not TF's 1/global, P30);
        every rank adds the whole L2 term, and the average keeps it whole.
        """
        with self._autocast():
            data_loss, metric = self._losses(self.net(xb), yb, "mean")
        loss = data_loss + self.l2_term() if self.spec.regularization.l2 > 0 else data_loss
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        return loss.detach(), metric.detach()

    def _first_bad_step(self, step_losses: torch.Tensor, begin: int, end: int) -> int | None:
        """The first step (1-based) in [begin, end) whose loss is not finite on any rank.

        Agreed by all ranks (a MIN over ranks, as a MAX of negatives): a rank whose own
        losses were still finite at that step reports it too, so every rank stops together.
        """
        local = (~torch.isfinite(step_losses[begin:end])).nonzero()
        mine = begin + int(local[0]) + 1 if len(local) else end + 1
        first = -distributed.max_all(-mine, self.placement)
        return first if first <= end else None

    def _bad_epoch(self, bad_step: int, step_losses: torch.Tensor) -> TrainedEpoch:
        loss = float(step_losses[bad_step - 1])
        loss = loss if not math.isfinite(loss) else math.nan  # it was not finite elsewhere
        return TrainedEpoch(logs={"loss": loss}, samples=0, bad_step=bad_step)

    @torch.inference_mode()
    def evaluate(self, split: str) -> Logs:
        if self.streamed is not None:
            return self.streamed.evaluate(split)
        x, y = self.data[split]
        # Each rank scores its own share; sums (not means) are reduced, so the result covers
        # the whole split exactly once (P29).
        share = torch.arange(
            self.placement.rank, len(x), self.placement.replicas, device=self.device
        )
        self.net.eval()
        totals = torch.zeros(2, device=self.device)
        for begin in range(0, len(share), EVAL_BATCH):
            idx = share[begin : begin + EVAL_BATCH]
            with self._autocast():
                loss_sum, metric_sum = self._losses(self.model(x[idx]), y[idx], "sum")
            totals += torch.stack([loss_sum.float(), metric_sum.float()])
        totals = distributed.sum_all(totals, self.placement)
        name = "accuracy" if self.classify else "mae"
        return {"loss": totals[0].item() / len(x), name: totals[1].item() / len(x)}

    @torch.inference_mode()
    def predict(self, x: np.ndarray) -> np.ndarray:
        self.model.eval()
        outputs = []
        with strict_fp32():
            for begin in range(0, len(x), EVAL_BATCH):
                xb = self._tensor_x(np.ascontiguousarray(x[begin : begin + EVAL_BATCH]))
                outputs.append(self.model(xb).float().cpu().numpy())
        return np.concatenate(outputs)

    def get_weights(self) -> list[np.ndarray]:
        return [t.detach().float().cpu().numpy().copy() for t in self.variables]

    @torch.no_grad()
    def set_weights(self, weights: list[np.ndarray]) -> None:
        for tensor, array in zip(self.variables, weights, strict=True):
            tensor.copy_(torch.from_numpy(np.asarray(array)).to(tensor.device, tensor.dtype))

    def l2_penalty(self) -> float:
        with torch.no_grad():
            return float(self.l2_term())

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def topology(self) -> dict[str, int | str]:
        ddp = isinstance(self.net, nn.parallel.DistributedDataParallel)
        replicas = distributed.world_size(self.placement)
        return {
            "replicas": replicas,
            "strategy": "ddp" if ddp else "single",
            "intra_op_threads": torch.get_num_threads(),
            "inter_op_threads": torch.get_num_interop_threads(),
        }

    def save_checkpoint(self, directory: Path) -> None:
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        torch.save(state, directory / "torch.pt")

    def load_checkpoint(self, directory: Path) -> None:
        state = torch.load(directory / "torch.pt", map_location=self.device, weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def export_model(self, directory: Path) -> Path:
        path = directory / MODEL_FILES["pytorch"]
        torch.save(self.model.state_dict(), path)
        return path

    def agree(self, value: int) -> int:
        return distributed.max_all(value, self.placement)

    def close(self, exiting: bool = False) -> None:
        if self.streamed is not None:
            self.streamed.close()
        distributed.shutdown(self.placement)  # ranks leave together, exiting or not


def use_threads(placement: Placement) -> None:
    """The thread pools the supervisor chose (worker.supervisor.threads). The inter-op pool
    can be sized once per process, before it first runs: a second back-end in the same
    process (the in-process tests) keeps the first one's."""
    if placement.threads:
        torch.set_num_threads(placement.threads)
    inter = placement.interop_threads
    if inter and torch.get_num_interop_threads() != inter:
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(inter)


def preload() -> None:
    """Pay PyTorch's lazy first-use costs before a job arrives (a warm child calls this):
    the first optimizer imports torch._dynamo, ~1.5 s."""
    torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=0.1, foreach=True)
