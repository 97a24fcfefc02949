"""One name for each concept (docs/architecture.md, Glossary): the Python files of app/, worker/
and the client use none of the names the glossary retired, and no two modules of app/ and
worker/ share a file name unless they are the same concept in different layers (listed below).

The migrations are history: they keep the names their revisions were written with.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("app", "worker", "client")
HISTORY = (Path("migrations"), Path("app/migrations"))

# A retired name, as a pattern, and the glossary's name for the concept.
RETIRED = {
    r"\bGangMember\b": "GangSeat (a gang's seat row, table gang_member)",
    r"\bJobRun\b": "UsageSpan (a job_run row)",
    r"\bmember_of\b": "rank_of (a worker's rank in its gang)",
    r"\bimport\b.*\bSeat\b|\bSeat\(|[:>|] Seat\b": "TakenSeat (the seat a claim hands back)",
    r"\bhost_key\b|\bthis_host\b": "machine_netns (the machine and network namespace)",
    r"\brun: Attempt\b": "attempt (the supervisor's Attempt)",
    r"\bbox(es)?\b(?!=)": "machine",
    r"\bclaim_dispatch\b|\brelease_dispatch\b": "reserve_publish / release_publish",
    r"\bdispatch_new\b": "publish_new",
    r"\bsend_train\b|\bsend_ingest\b": "publish_train / publish_ingest",
    r"\bwake_others\b|\bresend\b": "publish_others / try_republish",
    r"\bapp\.services\.dispatch\b": "app.services.publish",
    r"\bwarm_up\(\)": "warm_connection (a warm child's database connection)",
    r"\bmember_log\b": "rank_log (app.domain.rank_log, JobFiles.rank_log)",
    r"\bMemberLogLine\b": "RankLogLine (a rank's shipped log line, table member_log_line)",
    r"\.member\b": "rank (JobFiles.rank, LogShipper.rank: a node's index in its gang)",
}

# File names several modules may share: the same concept in each layer (route, schema, domain
# rule, service) or in each back-end, or the per-package convention of a registry's modules.
PACKAGE_FILES = {"__init__.py", "__main__.py"}
SHARED_BASENAMES = {
    "base.py": "what every kind of one registry's kinds is (graph, optimizers, schedules, ...)",
    "registry.py": "one registry's table of kinds, in that registry's package",
    "backend.py": "the framework-neutral back-end and each framework's",
    "graph.py": "the model graph built by each framework's back-end",
    "streamed.py": "a streamed data set: its reader, and each framework's input pipeline",
    "datasets.py": "data sets: the route and the domain rules",
    "dataset_uploads.py": "resumable uploads: the route and the domain rules",
    "uploads.py": "an uploaded data set: stored by the API, read by the training process",
    "health.py": "health: the probes' route and the store's state",
    "predictions.py": "predictions: the request schema and the service",
    "queue.py": "the queue: the route, its schema and the producer",
    "sweeps.py": "sweeps: the route, the domain rules and the controller",
    "warm_start.py": "warm start: the spec's schema, the submit check and the worker's weights",
}


def python_files(roots: tuple[str, ...]) -> list[Path]:
    """The project's Python files under `roots`, migrations left out."""
    files = []
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if not any(relative.is_relative_to(old) for old in HISTORY):
                files.append(relative)
    return files


def retired_uses(files: list[Path]) -> list[str]:
    """`file:line: name -> the glossary's name` for each retired name used."""
    found = []
    patterns = [(re.compile(pattern), new) for pattern, new in RETIRED.items()]
    for path in files:
        for number, line in enumerate((ROOT / path).read_text().splitlines(), 1):
            for pattern, new in patterns:
                hit = pattern.search(line)
                if hit:
                    found.append(f"{path}:{number}: {hit.group(0)!r} -> {new}")
    return found


def colliding_basenames(files: list[Path]) -> list[str]:
    """Each file name two or more modules share, that SHARED_BASENAMES does not list."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in files:
        by_name[path.name].append(str(path))
    return [
        f"{name}: {', '.join(paths)}"
        for name, paths in sorted(by_name.items())
        if len(paths) > 1 and name not in SHARED_BASENAMES and name not in PACKAGE_FILES
    ]


def test_no_retired_name_is_used_in_the_code() -> None:
    found = retired_uses(python_files(CHECKED))
    assert not found, "retired names (docs/architecture.md, Glossary):\n" + "\n".join(found)


def test_no_two_modules_share_a_name_unless_listed() -> None:
    found = colliding_basenames(python_files(("app", "worker")))
    assert not found, "modules that share a file name:\n" + "\n".join(found)


def test_each_listed_shared_name_is_still_shared() -> None:
    """A listed name two modules no longer share comes off the list, so it stays exact."""
    counts: dict[str, int] = defaultdict(int)
    for path in python_files(("app", "worker")):
        counts[path.name] += 1
    stale = [name for name in SHARED_BASENAMES if counts[name] < 2]
    assert not stale, f"listed but not shared: {stale}"


def test_the_check_finds_a_retired_name_and_a_collision(tmp_path: Path) -> None:
    """The patterns match what they retire (a check that matches nothing passes anything)."""
    lines = ["from app.domain.tables import GangMember", "def f(run: Attempt) -> None:"]
    lines += ["on a box", "Table(box=None)", "from app.scheduler.gang import Rendezvous, Seat"]
    lines += ["from app.domain import member_log", "self.member = member", "member_log_line"]
    hits = [line for line in lines if any(re.search(p, line) for p in RETIRED)]
    assert hits == [lines[0], lines[1], lines[2], lines[4], lines[5], lines[6]]
    twins = [Path("worker/a/gang.py"), Path("app/b/gang.py"), Path("app/c/base.py")]
    assert colliding_basenames(twins) == ["gang.py: worker/a/gang.py, app/b/gang.py"]
