"""Where epochal keeps files: every path inside a job's directory, and an upload's (stdlib only).

The API reads these paths (artifacts, logs), the supervisor and the training child write them;
all of them come from the job id or a server-made dataset id, never from a request.

    <artifacts_dir>/<job_id>/
        spec.json               the resolved spec, written by the supervisor per attempt
        job.log                 the child's output and the supervisor's notes (a gang's rank 0)
        member-N.log            the same, of a multi-node job's node N (1..nodes-1)
        member-N/               node N's own spec.json and the attempt files below (outcome,
                                stop, progress, ddp-store): what its supervisor and child share
        model/model.pt          the trained model (model.keras for TensorFlow)
        model/model.onnx        the model for predictions, with model/model-card.json
        model/weights.npz       its weights in both frameworks' layout, by node (a warm start's)
        checkpoints/epoch-NNNN  checkpoints; checkpoints/latest names the newest whole one
                                (with a store elsewhere: the local staging of its checkpoint
                                sets, checkpoints/epoch-NNNNNN-step-NNNNNNNNN/ there)
        outcome-N.json          attempt N's report to the supervisor
        stop-N                  why the supervisor asked attempt N to stop
        progress-N.json         attempt N's steps done in the epoch in progress
        ddp-store-N             attempt N's DDP rendezvous file
    <data_dir>/uploads/<dataset_id>.npz

Every worker may mount one shared artifacts directory, so a gang's nodes may all use one job
directory: each node's supervisor and child exchange files of that node's own (JobFiles with
its `rank`), and only global rank 0 writes the checkpoints and the model. Rank 0 and a
one-node job keep the names above.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MODEL_FILES = {"pytorch": "model.pt", "tensorflow": "model.keras"}  # framework -> file name
ONNX_FILE = "model.onnx"  # both frameworks export it beside their own file, for predictions
CARD_FILE = "model-card.json"  # what the ONNX model takes and returns
WEIGHTS_FILE = "weights.npz"  # "node/variable" -> array in Keras layout, either framework
LATEST = "latest"  # inside a checkpoints directory: names the newest complete checkpoint


@dataclass(frozen=True)
class JobFiles:
    """The files of the job whose directory is `root`, as the node of rank `rank` in its gang
    sees them (0: rank 0, or a one-node job)."""

    root: Path
    rank: int = 0

    @classmethod
    def of(cls, artifacts_dir: Path, job_id: str, rank: int = 0) -> JobFiles:
        """The job's directory under EPOCHAL_ARTIFACTS_DIR."""
        return cls(artifacts_dir / job_id, rank)

    @property
    def own(self) -> Path:
        """Where this node's supervisor and child exchange files: member-N/ for node N."""
        # Workers may share one artifacts directory: a node that starts late must not
        # rewrite or clear rank 0's spec, stop request, progress or outcome. The folder keeps
        # the name `member-N`: a job that ran under it keeps its files where it put them.
        return self.root if self.rank == 0 else self.root / f"member-{self.rank}"

    @property
    def spec(self) -> Path:
        return self.own / "spec.json"

    @property
    def log(self) -> Path:
        """This node's log (rank_log)."""
        return self.rank_log(self.rank)

    def rank_log(self, rank: int) -> Path:
        """The log that the node of rank `rank` writes: job.log for rank 0 (and one node)."""
        # Workers may share one artifacts directory: each node appends to a file of its own,
        # named `member-N.log` as a job that ran under that name wrote it.
        return self.root / ("job.log" if rank == 0 else f"member-{rank}.log")

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    def size_bytes(self) -> int:
        """What the job's files take, in all (0 when it has none yet)."""
        total = 0
        for folder, _, names in os.walk(self.root):
            for name in names:
                try:
                    total += os.lstat(os.path.join(folder, name)).st_size
                except OSError:  # gone meanwhile (a checkpoint rotated)
                    pass
        return total

    def model(self, framework: str) -> Path:
        """The exported model of a job trained with `framework`."""
        return self.model_dir / MODEL_FILES[framework]

    @property
    def onnx(self) -> Path:
        return self.model_dir / ONNX_FILE

    @property
    def model_card(self) -> Path:
        return self.model_dir / CARD_FILE

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def latest(self) -> Path:
        return latest_pointer(self.checkpoints)

    def outcome(self, attempt: int) -> Path:
        return self.own / f"outcome-{attempt}.json"

    def stop_request(self, attempt: int) -> Path:
        return self.own / f"stop-{attempt}"

    def progress(self, attempt: int) -> Path:
        return self.own / f"progress-{attempt}.json"

    def ddp_store(self, attempt: int) -> Path:
        return self.own / f"ddp-store-{attempt}"


def job_key(job_id: str, *parts: str) -> str:
    """A job's file as a key of the artifact store (app.storage): the store keeps the artifacts
    directory's layout, so with the default store the key is that very file."""
    return "/".join((job_id, *parts))


def write_whole(path: Path, text: str) -> None:
    """Replace `path` with `text` at once: another process reads the old file or the new one,
    never a truncated one (written aside, then renamed)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def latest_pointer(checkpoints: Path) -> Path:
    """The file in a checkpoints directory that names its newest complete checkpoint."""
    return checkpoints / LATEST


def upload_path(data_dir: Path, dataset_id: str) -> Path:
    """Where an upload lives; ids are server-made UUIDs, never a client's path."""
    return data_dir / "uploads" / f"{dataset_id}.npz"
