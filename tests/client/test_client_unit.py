"""The client's offline parts: its imports, SSE parsing, key lookup, spec files and log tails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from rich.console import Console

from epochal_client import render
from epochal_client.cli import load_spec, new_lines
from epochal_client.client import ApiError, Client, default_api_key, parse_sse
from tests.helpers import ROOT, wait_until

BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"{{name}} must not be needed by the client")
sys.meta_path.insert(0, Block())
from epochal_client.client import Client, ApiError
with Client("http://127.0.0.1:9", "k") as c:
    assert c.url == "http://127.0.0.1:9"
print("ok", sorted(m for m in sys.modules if m.split(".")[0] in ("app", "epochal_client")))
"""


def test_client_imports_with_httpx_and_the_standard_library_only() -> None:
    blocked = {
        "fastapi", "starlette", "sqlalchemy", "celery", "kombu", "pydantic",
        "pydantic_settings", "typer", "rich", "yaml", "prometheus_client", "numpy", "app",
    }  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", BLOCKER.format(blocked=blocked)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "ok ['epochal_client', 'epochal_client.client', 'epochal_client.sweeps', "
        "'epochal_client.types']"
    )


def test_parse_sse_follows_the_event_stream_rules() -> None:
    lines = [
        ": keep-alive",
        "",
        "event: epoch",
        "id: 3.1.2",
        'data: {"epoch": 2,',
        'data:  "val_loss": 0.5}',
        "",
        'data: {"x": 1}',
        "",
        "event: transition",
        "",  # no data: not an event
    ]
    events = list(parse_sse(lines))
    assert [(e.type, e.id) for e in events] == [("epoch", "3.1.2"), ("message", None)]
    assert events[0].data == {"epoch": 2, "val_loss": 0.5} and events[1].data == {"x": 1}


def test_key_comes_from_env_then_the_key_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("EPOCHAL_API_KEY", "EPOCHAL_API_KEY_FILE", "EPOCHAL_URL", "EPOCHAL_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EPOCHAL_HOME", str(tmp_path))
    assert default_api_key() is None
    (tmp_path / "api-key").write_text("ep_fromfile\n")
    assert default_api_key() == "ep_fromfile"
    monkeypatch.setenv("EPOCHAL_API_KEY", "ep_fromenv")
    with Client() as client:
        assert client.url == "http://127.0.0.1:8000"
        assert client._http.headers["Authorization"] == "Bearer ep_fromenv"


def test_the_url_is_epochal_url_else_the_local_port_epochal_up_serves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("EPOCHAL_URL", raising=False)
    monkeypatch.setenv("EPOCHAL_PORT", "9123")  # as `EPOCHAL_PORT=9123 make run` serves
    with Client(api_key="") as client:
        assert client.url == "http://127.0.0.1:9123"
    monkeypatch.setenv("EPOCHAL_URL", "http://gpu-box:8000/")
    with Client(api_key="") as client:
        assert client.url == "http://gpu-box:8000"


def test_load_spec_reads_yaml_and_applies_overrides(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("framework: pytorch\ndataset: {name: digits}\ntraining: {epochs: 3}\n")
    spec = load_spec(
        path, ["training.epochs=10", "optimizer.learning_rate=3e-4", "tags.team=vision"]
    )
    assert spec["training"] == {"epochs": 10}
    assert spec["optimizer"] == {"learning_rate": 3e-4} and spec["tags"] == {"team": "vision"}
    for bad in ("training.epochs", "=3", "framework.x=1"):
        with pytest.raises(typer.BadParameter):
            load_spec(path, [bad])
    path.write_text("- a list")
    with pytest.raises(typer.BadParameter):
        load_spec(path, [])


def test_set_reaches_a_sweeps_dotted_parameter_names_and_list_items(tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "base: {model: {layers: [{op: dense, units: 8}]}, training: {epochs: 27}}\n"
        "parameters:\n  optimizer.learning_rate: {type: loguniform, low: 0.0001, high: 0.03}\n"
        "max_trials: 24\n"
    )
    overrides = [
        "max_trials=2",
        "parameters.optimizer.learning_rate.high=0.1",
        "base.training.epochs=3",
        "base.model.layers.0.units=4",
        "objective.metric=val_accuracy",
    ]
    spec = load_spec(path, overrides)
    assert spec["max_trials"] == 2 and spec["base"]["training"] == {"epochs": 3}
    lr = spec["parameters"]["optimizer.learning_rate"]
    assert lr == {"type": "loguniform", "low": 0.0001, "high": 0.1}
    assert spec["base"]["model"]["layers"] == [{"op": "dense", "units": 4}]
    assert spec["objective"] == {"metric": "val_accuracy"}
    for bad in ("base.model.layers.3.units=1", "base.model.layers.x=1", "max_trials.x=1", "a..b=1"):
        with pytest.raises(typer.BadParameter):
            load_spec(path, [bad])


def test_sweep_submit_sends_the_spec_with_its_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from epochal_client import sweep_cli

    sent: list[dict[str, Any]] = []

    class Recorder:
        def __enter__(self) -> Recorder:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def submit_sweep(self, spec: dict[str, Any]) -> Any:
            sent.append(spec)
            return type("S", (), {"id": "s1"})()

    monkeypatch.setattr(sweep_cli, "_client", Recorder)
    path = tmp_path / "sweep.yaml"
    path.write_text("parameters: {optimizer.learning_rate: {high: 0.03}}\nmax_trials: 24\n")
    args = ["submit", str(path), "--set", "max_trials=2"]
    args += ["--set", "parameters.optimizer.learning_rate.high=0.1"]
    run = CliRunner().invoke(sweep_cli.sweep, args)
    assert run.exit_code == 0, run.output
    assert sent == [{"parameters": {"optimizer.learning_rate": {"high": 0.1}}, "max_trials": 2}]


def test_a_failed_sweeps_table_says_why() -> None:
    from epochal_client import sweep_cli
    from epochal_client.sweeps import Sweep
    from epochal_client.types import build

    body = {"id": "s1", "name": "lr", "status": "failed", "trials_launched": 1, "max_trials": 4}
    why = "failed trials: 1, more than max_failed_trials=0"
    item = build(Sweep, {**body, "objective": {"metric": "val_loss"}, "error": why})
    assert item.error == why
    assert sweep_cli.trials_table(item).caption == f"failed: {why}"


@pytest.mark.parametrize("name", ["native", "onnx", "model-card", "card"])
def test_download_formats_are_the_route_names_and_card_stays_an_alias(
    name: str, tmp_path: Path
) -> None:
    asked: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(200, content=b"x")

    with Client("http://epochal.test", "k", transport=httpx.MockTransport(server)) as client:
        client.download_model("j1", tmp_path / "out", name)
        with pytest.raises(ValueError, match="native, onnx, model-card"):
            client.download_model("j1", tmp_path / "out", "keras")
    route = {"native": "model", "onnx": "onnx"}.get(name, "model-card")
    assert asked == [f"/v1/jobs/j1/artifacts/{route}"]


def test_new_lines_of_a_sliding_log_tail() -> None:
    assert new_lines(["a", "b", "c"], ["b", "c", "d", "e"]) == ["d", "e"]
    assert new_lines(["a", "b"], ["a", "b"]) == []
    assert new_lines([], ["a"]) == ["a"]
    assert new_lines(["x"], ["y", "z"]) == ["y", "z"]  # no overlap: all of it is new


def test_client_types_follow_the_api_schemas() -> None:
    from dataclasses import fields

    from app.schemas import metric_row
    from app.schemas.api import JobPublic
    from app.schemas.api import MetricRow as ServerRow
    from epochal_client import types
    from epochal_client.types import Job, MetricRow

    assert [f.name for f in fields(MetricRow)] == list(ServerRow.model_fields)
    assert types.ROW_FIELDS == metric_row.ROW_FIELDS  # the client's mirror of the one definition
    assert (types.SPLITS, types.SCORES) == (metric_row.SPLITS, metric_row.SCORES)
    assert {f.name for f in fields(Job)} == set(JobPublic.model_fields)


class PollOnlyServer:
    """A server without the events route, as an httpx.MockTransport handler.

    Mocked (this is a client unit test): the real API always has the route, so its absence
    (an older server, a proxy refusing streams) can only be played. Each GET of the job
    moves it on: queued, then running with one more epoch per poll, then succeeded.
    """

    def __init__(self, events_status: int) -> None:
        self.events_status, self.job_gets, self.events_gets = events_status, 0, 0
        self.since: list[int] = []

    def state(self) -> tuple[str, list[str], int]:
        """(status, transitions so far, epochs finished) at the current poll."""
        if self.job_gets <= 1:
            return "queued", ["queued"], 0
        if self.job_gets <= 3:
            return "running", ["queued", "running"], self.job_gets - 1
        return "succeeded", ["queued", "running", "succeeded"], 3

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/jobs/j1/events":
            self.events_gets += 1
            return httpx.Response(self.events_status, json={"title": "Not Found", "detail": "-"})
        if path == "/v1/jobs/j1":
            self.job_gets += 1
            status, names, epochs = self.state()
            moves = [{"from_status": a, "to_status": b, "reason": "r"}
                     for a, b in zip([None, *names], names, strict=False)]  # fmt: skip
            return httpx.Response(200, json={
                "id": "j1", "name": "job", "framework": "pytorch", "status": status,
                "attempt": 1, "epochs": 3, "current_epoch": epochs,
                "created_at": "2025-01-01T00:00:00Z", "transitions": moves,
            })  # fmt: skip
        if path == "/v1/jobs/j1/metrics":
            since = int(request.url.params["since_epoch"])
            self.since.append(since)
            rows = [
                {"epoch": e, "train_loss": 1.0 / e} for e in range(since + 1, self.state()[2] + 1)
            ]
            return httpx.Response(200, json={"items": rows})
        return httpx.Response(404, json={"title": "Not Found", "detail": path})


@pytest.mark.parametrize("events_status", [404, 405])
def test_follow_falls_back_to_polling_without_an_events_route(events_status: int) -> None:
    server = PollOnlyServer(events_status)
    with Client("http://epochal.test", "k", transport=httpx.MockTransport(server)) as client:
        events = list(client.follow("j1", poll_interval=0))
    labels = [(e.type, e.data.get("to_status", e.data.get("epoch"))) for e in events]
    assert labels == [
        ("transition", "queued"),
        ("transition", "running"),
        ("epoch", 1),
        ("epoch", 2),
        ("epoch", 3),
        ("transition", "succeeded"),
    ]
    assert server.events_gets == 1  # asked once, then polled
    assert server.since == [0, 1, 2]  # each poll asks only for rows after the last seen


def test_follow_without_an_events_route_still_reports_a_missing_job_or_sse_only() -> None:
    server = PollOnlyServer(404)
    transport = httpx.MockTransport(server)
    with Client("http://epochal.test", "k", transport=transport) as client:
        with pytest.raises(ApiError) as missing:
            list(client.follow("nope", poll_interval=0))
        assert missing.value.status == 404 and server.job_gets == 0
        with pytest.raises(ApiError) as refused:
            list(client.follow("j1", mode="sse"))
        assert refused.value.status == 404 and server.job_gets == 0


def job_at(epoch: int, progress: dict[str, int] | None = None) -> Any:
    """A running 4-epoch job after `epoch` epochs, with the step progress the server reports."""
    from epochal_client.types import Job, build

    return build(Job, {
        "id": "j1", "name": "job", "framework": "pytorch", "status": "running", "attempt": 1,
        "epochs": 4, "current_epoch": epoch, "created_at": "2025-01-01T00:00:00Z",
        "step_progress": progress,
    })  # fmt: skip


def test_follow_moves_the_bar_and_its_eta_within_the_first_epoch() -> None:
    from epochal_client.follow import View
    from epochal_client.types import Event

    view = View(job_at(0))
    (task,) = view.progress.tasks
    assert (task.completed, task.fields["steps"], task.time_remaining) == (0, "", None)
    view.apply_job(job_at(0, {"epoch": 1, "step": 25, "steps": 100}))
    view.apply_job(job_at(0, {"epoch": 1, "step": 50, "steps": 100}))
    assert task.completed == 0.5 and task.fields["steps"] == "step 50/100"
    assert task.time_remaining is not None  # the ETA the bar showed as -:--:-- all epoch
    view.apply_job(job_at(0, {"epoch": 1, "step": 40, "steps": 100}))  # a late, older read
    assert task.completed == 0.5
    view.apply(Event("epoch", {"epoch": 1, "train_loss": 0.5}, None))
    assert (task.completed, task.fields["steps"]) == (1, "")
    view.apply_job(job_at(1, {"epoch": 1, "step": 100, "steps": 100}))  # of the ended epoch
    assert task.completed == 1
    view.apply_job(job_at(1, {"epoch": 2, "step": 30, "steps": 120}))
    assert task.completed == 1.25
    text = rendered([view.render()])
    assert "1/4 epochs step 30/120" in " ".join(text.split())
    shown = rendered([render.job_details(job_at(1, {"epoch": 2, "step": 30, "steps": 120}))])
    assert "1/4 epochs (epoch 2: step 30/120)" in shown


def test_follow_reads_the_jobs_steps_while_it_waits_for_events() -> None:
    from epochal_client.follow import View, polling_steps

    answers = [job_at(0, {"epoch": 1, "step": 10 * n, "steps": 100}) for n in range(1, 4)]

    def server(request: httpx.Request) -> httpx.Response:
        job = answers[min(len(gets), 2)]
        gets.append(request.url.path)
        return httpx.Response(200, json={**vars(job), "created_at": "2025-01-01T00:00:00Z"})

    gets: list[str] = []
    view = View(job_at(0))
    with Client("http://epochal.test", "k", transport=httpx.MockTransport(server)) as client:
        with polling_steps(client, view, every=0.01):
            wait_until(lambda: view.completed == 0.3, 10, "the third read on the bar")
    assert set(gets) == {"/v1/jobs/j1"}


def rendered(tables: list[Any]) -> str:
    console = Console(record=True, width=120)
    for table in tables:
        console.print(table)
    return console.export_text()


def test_show_renders_the_per_class_table_and_top_confusions() -> None:
    per_class = [
        {"class": k, "precision": 0.5 + k / 10, "recall": None if k == 2 else 0.75, "f1": 0.6,
         "support": 10 + k}
        for k in range(3)
    ]  # fmt: skip
    report = {
        "split": "test", "task": "classification", "samples": 33, "accuracy": 0.8125,
        "macro_f1": 0.6, "per_class": per_class, "confusion_matrix": [[1]],
        "top_confusions": [{"true": 2, "predicted": 1, "count": 7}],
    }  # fmt: skip
    text = rendered(render.evaluation_tables({"test_accuracy": 0.8125, "evaluation": report}))
    assert "evaluation on test (33 samples): accuracy 0.8125, macro F1 0.6" in text
    lines = [line.split() for line in text.splitlines()]
    assert ["0", "0.5", "0.75", "0.6", "10"] in lines and ["2", "0.7", "–", "0.6", "12"] in lines
    assert ["2", "1", "7"] in lines  # true 2 predicted as 1, 7 times
    assert render.evaluation_tables({"test_accuracy": 0.5}) == []


def test_show_renders_a_regression_report() -> None:
    report = {
        "split": "val", "task": "regression", "samples": 9, "mae": 0.25, "rmse": 0.5, "r2": 0.9,
        "residual_quantiles": {"5": -1.0, "25": -0.5, "50": 0.0, "75": 0.5, "95": 1.0},
    }  # fmt: skip
    text = rendered(render.evaluation_tables({"evaluation": report}))
    lines = [line.split() for line in text.splitlines()]
    assert ["mae", "0.25"] in lines and ["r2", "0.9"] in lines
    assert ["residual", "p95", "1"] in lines


def test_show_renders_the_models_summary_and_its_layers() -> None:
    from epochal_client.types import Job, build

    summary = {
        "parameters": 650, "flops_per_sample": 1344,
        "layers": [
            {"name": "flatten", "op": "flatten", "output_shape": [64], "parameters": 0},
            {"name": "head", "op": "dense", "output_shape": [10], "parameters": 650},
        ],
    }  # fmt: skip
    base = {"id": "j", "name": "n", "framework": "pytorch", "status": "queued", "attempt": 0,
            "epochs": 1, "current_epoch": 0, "created_at": "2025-01-01T00:00:00Z"}  # fmt: skip
    job = build(Job, {**base, "model_summary": summary})
    text = rendered([render.job_details(job), render.layers_table(job)])
    assert "650 parameters, 1,344 FLOPs per sample, 2 layers" in text
    lines = [line.split() for line in text.splitlines()]
    assert ["flatten", "flatten", "(64,)", "0"] in lines
    assert ["head", "dense", "(10,)", "650"] in lines
    frozen = {**summary, "parameters": 650, "frozen_parameters": 4160}
    frozen["layers"] = [
        {"name": "dense", "op": "dense", "output_shape": [64], "parameters": 0,
         "frozen_parameters": 4160},
        summary["layers"][1],
    ]  # fmt: skip
    frozen_job = build(Job, {**base, "model_summary": frozen})
    text = rendered([render.job_details(frozen_job), render.layers_table(frozen_job)])
    assert "650 trainable and 4,160 frozen parameters" in text
    assert ["dense", "dense", "(64,)", "4,160", "frozen"] in [x.split() for x in text.splitlines()]
    older = build(Job, base)  # a job the server stored before it kept summaries
    assert render.layers_table(older) is None
    assert "parameters" not in rendered([render.job_details(older)])


def test_show_and_jobs_say_which_metric_is_best_and_flatten_the_result() -> None:
    from epochal_client.types import Job, build

    base = {"id": "j", "name": "n", "framework": "pytorch", "status": "succeeded", "attempt": 1,
            "epochs": 3, "current_epoch": 3, "created_at": "2025-01-01T00:00:00Z",
            "best_epoch": 2, "best_metric": 0.3121, "best_metric_name": "val_accuracy"}  # fmt: skip
    result = {"best_epoch": 2, "replicas": 1, "export": {"onnx": {"opset": 17, "bytes": 2048}}}
    job = build(Job, {**base, "result": result})
    text = rendered([render.job_details(job), render.jobs_table([job])])
    assert text.count("val_accuracy 0.3121 @ epoch 2") == 2
    lines = [line.split() for line in text.splitlines()]
    assert ["result.best_epoch", "2"] in lines and ["result.replicas", "1"] in lines
    assert ["result.export.onnx.opset", "17"] in lines and "{" not in text


def test_show_gives_each_warning_of_the_result_a_row() -> None:
    from epochal_client.types import Job, build

    base = {"id": "j", "name": "n", "framework": "pytorch", "status": "succeeded", "attempt": 1,
            "epochs": 3, "current_epoch": 3, "created_at": "2025-01-01T00:00:00Z"}  # fmt: skip
    warned = {"test_accuracy": 0.1, "warnings": ["test accuracy 0.100 is far below"]}
    text = rendered([render.job_details(build(Job, {**base, "result": warned}))])
    assert ["warning", "test", "accuracy", "0.100", "is", "far", "below"] in [
        line.split() for line in text.splitlines()
    ]
    quiet = rendered([render.job_details(build(Job, {**base, "result": {"warnings": []}}))])
    assert "warning" not in quiet


def test_show_names_fashion_mnists_classes() -> None:
    from app.schemas.dataset_spec import CLASS_NAMES, class_labels
    from app.schemas.job_spec import JobSpec

    fashion = JobSpec.model_validate({"framework": "pytorch", "dataset": {"name": "fashion_mnist"}})
    digits = JobSpec.model_validate({"framework": "pytorch", "dataset": {"name": "digits"}})
    assert class_labels(fashion, 10) == list(CLASS_NAMES["fashion_mnist"])
    assert class_labels(digits, 10) == list(range(10))
    per_class = [{"class": k, "precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}
                 for k in range(10)]  # fmt: skip
    report = {
        "split": "test", "task": "classification", "samples": 10, "accuracy": 1.0,
        "macro_f1": 1.0, "per_class": per_class, "confusion_matrix": [[1]],
        "top_confusions": [{"true": 6, "predicted": 0, "count": 7}],
        "classes": class_labels(fashion, 10),
    }  # fmt: skip
    text = rendered(render.evaluation_tables({"evaluation": report}))
    assert "Ankle boot" in text and "Trouser" in text
    assert ["Shirt", "T-shirt/top", "7"] in [line.split() for line in text.splitlines()]


def test_the_queue_prints_position_eta_and_reason_then_others_counts() -> None:
    def server(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/queue" and request.url.params["limit"] == "50"
        entry = {
            "id": "j1", "name": "urgent", "owner_id": "k1", "priority": 90, "gpus": 1,
            "created_at": "2026-12-03T06:00:00Z", "position": 1,
            "reason": "next to run: every worker that fits is busy",
            "estimated_start": "2026-12-03T06:05:00Z",
        }  # fmt: skip
        others = [{"owner_id": "k2", "priority": 50, "jobs": 3}]
        return httpx.Response(
            200, json={"jobs": [entry], "others": others, "queued": 4, "truncated": False}
        )

    with Client("http://epochal.test", "k", transport=httpx.MockTransport(server)) as client:
        view = client.queue()
    text = rendered([render.queue_table(view)])
    assert "urgent" in text and "next to run: every worker that fits is busy" in text
    assert "3 queued" in text and "key k2" in text
