"""The service's PyTorch graph model against the same network written by hand, side by side.

`python -m benchmarks --only hand_written [--quick]`, or
`python -m benchmarks.training.hand_written [--tiny|--quick] [--threads N] [--cpu-time]
[--network NAME ...] [--profile NETWORK PRECISION]`:
for the residual CNN, the MLP and the row-LSTM of examples/ (and the row-LSTM's graph with a
GRU in its place; `--network` picks some), the graph model the worker builds from the
example's spec (benchmarks.training.hand_written.graph_model) and the plain nn.Module of
benchmarks.training.hand_networks train on the same Fashion-MNIST batches (the system copy,
scaled to [0, 1]) with the same AdamW, batch 128, 2 threads, in one process, in fp32 and
under bf16 autocast. The two alternate in pairs, a block of steps of each (one CNN step,
or enough of a small network's to fill a few milliseconds), the order swapped every pair;
graph / hand is the median of the pairs' ratios (p25-p75 their spread), and each side's
samples/s its median block's. Load on a shared machine moves both blocks of a pair alike and
cancels in their ratio; a slow moment that hits one block moves one pair, which the median
leaves out. Denormal floats are flushed to zero while they step (see flushed_denormals).
`--profile` prints torch.profiler's per-op self CPU table of a few steps of each side.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.training.architectures import EXAMPLES, example
from benchmarks.training.common import bench_parser, fashion_arrays, print_aligned
from benchmarks.training.hand_networks import hand_network
from benchmarks.training.suite import bench

NETWORKS = {
    "resnet": "residual-fashion-mnist.yaml",
    "mlp": "graph-mlp-fashion.yaml",
    "row_lstm": "lstm-rows-fashion-mnist.yaml",
    "row_gru": "lstm-rows-fashion-mnist.yaml",  # the row-LSTM with a GRU in the LSTM's place
}
PRECISIONS = ("fp32", "bf16")
BATCH = 128
THREADS = 2
BATCHES = 32  # distinct batches, cycled
PROFILE_ROWS = 15
HEADER = ["network", "precision", "hand samples/s", "graph samples/s", "graph / hand", "p25-p75"]


@dataclass(frozen=True)
class Pace:
    """How long the sides alternate: `warmup` steps each, then pairs of blocks until at least
    `pairs` pairs and `seconds` of `clock` (wall time; or the process's CPU time, which another
    process's load moves far less: with one thread it is the step's own work). A block is as
    many steps as take about `block` seconds, at least one."""

    warmup: int
    pairs: int
    seconds: float
    block: float = 0.02
    clock: Callable[[], float] = time.perf_counter


FULL, QUICK, TINY = Pace(5, 40, 12.0), Pace(3, 15, 2.0), Pace(1, 2, 0.0, 0.0)


@dataclass(frozen=True)
class Pairs:
    """The measured pairs: each side's clock time per block, and the steps a block runs."""

    times: dict[str, list[float]]
    steps: int

    def samples_per_second(self, side: str) -> float:
        return BATCH * self.steps / float(np.median(self.times[side]))

    def ratios(self) -> tuple[float, float, float]:
        """graph / hand speed per pair (hand time over graph time): p25, median, p75."""
        per_pair = np.array(self.times["hand"]) / np.array(self.times["graph"])
        p25, p50, p75 = np.percentile(per_pair, [25, 50, 75])
        return float(p25), float(p50), float(p75)


def spec_of(network: str) -> dict:
    """The example's spec, in PyTorch, with the residual example's AdamW for every network."""
    spec = example(NETWORKS[network], "pytorch", batch_size=BATCH)
    if network == "row_gru":
        for layer in spec["model"]["layers"]:
            layer["op"] = "gru" if layer["op"] == "lstm" else layer["op"]
    spec["optimizer"] = example(NETWORKS["resnet"], "pytorch")["optimizer"]
    return spec


def graph_model(body: dict) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model and optimizer as worker.training.torch.backend builds them for the spec."""
    from app.schemas.dataset_spec import model_input
    from app.schemas.job_spec import JobSpec
    from app.schemas.spec_graph import built_model
    from worker.training.init import initial_weights
    from worker.training.torch.graph import KIT, GraphModule

    spec = JobSpec.model_validate(body)
    graph = built_model(spec, model_input(spec, (28, 28)), 10)
    model = GraphModule(graph)
    with torch.no_grad():
        weights = initial_weights(graph.variables(), spec.training.seed)
        for tensor, array in zip(model.variables(), weights, strict=True):
            tensor.copy_(torch.from_numpy(np.asarray(array)))
    return model, spec.optimizer.torch_optimizer(KIT, list(model.parameters()))


def models(network: str) -> dict[str, tuple[nn.Module, torch.optim.Optimizer]]:
    """{"hand": ..., "graph": ...}: both with the optimizer the spec makes (the same code)."""
    from app.schemas.job_spec import JobSpec
    from worker.training.torch.graph import KIT

    body = spec_of(network)
    hand = hand_network(network)
    optimizer = JobSpec.model_validate(body).optimizer.torch_optimizer(KIT, list(hand.parameters()))
    return {"hand": (hand, optimizer), "graph": graph_model(body)}


def batches(count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    (x, y), _ = fashion_arrays()
    images = torch.from_numpy(x[: count * BATCH].astype(np.float32) / 255.0)
    labels = torch.from_numpy(y[: count * BATCH])
    return list(zip(images.split(BATCH), labels.split(BATCH), strict=True))


@contextlib.contextmanager
def precision(name: str) -> Iterator[None]:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=name == "bf16"):
        yield


def stepper(
    model: nn.Module, optimizer: torch.optim.Optimizer, prec: str
) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """One training step as the back-end's `_step` takes it (no L2 term: the examples have none)."""

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        with precision(prec):
            loss = F.cross_entropy(model(x).float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    model.train()
    return step


class Cycle:
    """One side's steps on the cycled batches, each side at its own place in them."""

    def __init__(self, step: Callable[[torch.Tensor, torch.Tensor], None], data: list) -> None:
        self.step, self.data, self.done = step, data, 0

    def run(self, steps: int, clock: Callable[[], float]) -> float:
        """`steps` steps; the clock's time they took."""
        before = clock()
        for _ in range(steps):
            self.step(*self.data[self.done % len(self.data)])
            self.done += 1
        return clock() - before


def alternate(sides: dict[str, Cycle], pace: Pace) -> Pairs:
    """Warm-up, then pairs of blocks, the order swapped every pair so neither side always
    runs right after the other (its caches, its allocator's state)."""
    for side in sides.values():
        side.run(pace.warmup, pace.clock)
    step_time = max(side.run(1, pace.clock) for side in sides.values())
    steps = max(1, round(pace.block / step_time)) if step_time > 0 else 1
    times: dict[str, list[float]] = {name: [] for name in sides}
    began = pace.clock()
    while len(times["hand"]) < pace.pairs or pace.clock() - began < pace.seconds:
        order = list(sides) if len(times["hand"]) % 2 == 0 else list(reversed(sides))
        for name in order:
            times[name].append(sides[name].run(steps, pace.clock))
    return Pairs(times, steps)


def measure(network: str, data: list, pace: Pace) -> list[list[str]]:
    """The table's rows for one network: a row per precision from its alternated pairs."""
    rows = []
    for prec in PRECISIONS:
        # Fresh models for each precision: each starts from its initial weights.
        built = models(network)
        sides = {
            side: Cycle(stepper(model, opt, prec), data) for side, (model, opt) in built.items()
        }
        pairs = alternate(sides, pace)
        p25, ratio, p75 = pairs.ratios()
        speed = {side: pairs.samples_per_second(side) for side in sides}
        name = f"hand_written_{network}_{prec}"
        for side in sides:
            bench(f"{name}_{side}_samples_per_s", speed[side], "samples/s")
        bench(f"{name}_graph_vs_hand_x", ratio, "x")
        bench(f"{name}_graph_vs_hand_p25_x", p25, "x")
        bench(f"{name}_graph_vs_hand_p75_x", p75, "x")
        hand, graph = f"{speed['hand']:,.0f}", f"{speed['graph']:,.0f}"
        rows.append([network, prec, hand, graph, f"{ratio:.2f}", f"{p25:.2f}-{p75:.2f}"])
    return rows


def run(
    quick: bool = False,
    tiny: bool = False,
    threads: int = THREADS,
    cpu_time: bool = False,
    networks: list[str] | None = None,
) -> list[list[str]]:
    torch.set_num_threads(threads)
    pace = TINY if tiny else QUICK if quick else FULL
    pace = replace(pace, clock=time.process_time) if cpu_time else pace
    data = batches(BATCHES)
    with flushed_denormals():
        return [row for network in networks or NETWORKS for row in measure(network, data, pace)]


@contextlib.contextmanager
def flushed_denormals() -> Iterator[None]:
    """Denormal floats flushed to zero while the sides step. Trained for thousands of steps
    on the same few batches, the graph's MLP (Keras' initial weights) reaches denormal values
    where the hand-written one (PyTorch's) does not, and its steps slow by a third: a cost of
    where the two sides' weights happen to go, not of either's code."""
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)  # PyTorch's default; other benchmarks follow in-process


def print_table(rows: list[list[str]], threads: int = THREADS, clock: str = "wall time") -> None:
    title = (
        f"Graph model vs the same network by hand ({EXAMPLES.name}/): PyTorch, CPU, batch "
        f"{BATCH}, {threads} threads, AdamW, {clock}; graph / hand: the median of alternated "
        "pairs' ratios, p25-p75 their spread"
    )
    print_aligned(title, HEADER, rows, right=range(2, len(HEADER)))


def profile(network: str, prec: str, threads: int = THREADS, steps: int = 5) -> None:
    """torch.profiler's per-op self CPU time per step, after warm-up: each side's full table,
    then the ops that lead either side's, side by side."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    torch.set_num_threads(threads)
    data = batches(steps + 3)
    per_op: dict[str, dict[str, tuple[float, float]]] = {}
    for side, (model, opt) in models(network).items():
        step = stepper(model, opt, prec)
        for x, y in data[:3]:
            step(x, y)
        with profiler(activities=[ProfilerActivity.CPU]) as trace:
            for x, y in data[3:]:
                step(x, y)
        events = trace.key_averages()
        print(f"\n{side}: {network} {prec}, {steps} steps of batch {BATCH}, {threads} threads")
        print(events.table(sort_by="self_cpu_time_total", row_limit=PROFILE_ROWS))
        per_op[side] = {
            e.key: (e.self_cpu_time_total / 1000 / steps, e.count / steps) for e in events
        }
    print_profile(per_op, f"{network} {prec}")


def print_profile(per_op: dict[str, dict[str, tuple[float, float]]], title: str) -> None:
    """Self CPU ms and calls per step of the ops that lead either side, and each side's total."""
    hand, graph = per_op["hand"], per_op["graph"]
    lead = sorted(
        {*hand, *graph}, key=lambda k: -max(hand.get(k, (0, 0))[0], graph.get(k, (0, 0))[0])
    )
    print(f"\nself CPU ms per step (calls), {title}: hand | graph")
    for key in lead[:PROFILE_ROWS]:
        (h_ms, h_calls), (g_ms, g_calls) = hand.get(key, (0, 0)), graph.get(key, (0, 0))
        print(f"{key[:52]:<52} {h_ms:8.2f} ({h_calls:4.0f}) | {g_ms:8.2f} ({g_calls:4.0f})")
    total = {side: sum(ms for ms, _ in ops.values()) for side, ops in per_op.items()}
    print(f"{'total':<52} {total['hand']:8.2f}        | {total['graph']:8.2f}")


def main() -> None:
    prog = "python -m benchmarks.training.hand_written"
    parser = bench_parser(prog, quick="fewer pairs", threads=THREADS, timed="steps")
    parser.add_argument("--profile", nargs=2, metavar=("NETWORK", "PRECISION"))
    parser.add_argument("--network", action="append", choices=list(NETWORKS), help="only these")
    args = parser.parse_args()
    if args.profile:
        network, prec = args.profile
        profile(network, prec, threads=args.threads)
    else:
        rows = run(args.quick, args.tiny, args.threads, args.cpu_time, args.network)
        print_table(rows, args.threads, "CPU time" if args.cpu_time else "wall time")


if __name__ == "__main__":
    main()
