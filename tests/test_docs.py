"""Docs that must not drift: the site's generated references and its build, the examples,
DEPLOY.md, RELIABILITY.md's citations, links."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.schemas.dataset_spec import input_shape_and_classes, model_input
from app.schemas.graph import OPS
from app.schemas.job_spec import JobSpec
from app.schemas.spec_graph import built_model
from epochal_client.cli import load_spec
from tools.spec_reference import PAGES, rewrite

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
SPEC_PAGE, OPS_PAGE = PAGES["spec-reference"], PAGES["ops-reference"]
GRAPH_GUIDE = ROOT / "docs" / "guide" / "spec.md"


@pytest.mark.parametrize("marker", PAGES, ids=str)
def test_each_generated_reference_is_current(marker: str) -> None:
    page = PAGES[marker].read_text()
    assert f"<!-- BEGIN {marker}" in page
    assert rewrite(page) == page, f"{PAGES[marker]} is stale: run python -m tools.spec_reference"


def test_the_references_list_every_field_and_op_and_the_check_agrees() -> None:
    spec, ops = SPEC_PAGE.read_text(), OPS_PAGE.read_text()
    assert not [f for f in JobSpec.model_fields if f"| `{f}` |" not in spec]
    assert not [op for op in OPS if f"#### op `{op}`" not in ops]
    check = [sys.executable, "-m", "tools.spec_reference", "--check"]
    assert subprocess.run(check, cwd=ROOT).returncode == 0


def test_a_changed_schema_is_caught() -> None:
    page = SPEC_PAGE.read_text()
    stale = page.replace("| `max_restarts` | integer | `2`", "| `max_restarts` | integer | `3`")
    assert stale != page and rewrite(stale) == page


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    """mkdocs-material with --strict: a broken link, anchor or page fails it."""
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path)]
    run = subprocess.run(build, cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_there_is_an_example_for_each_kind_of_run() -> None:
    specs = [JobSpec.model_validate(load_spec(path, [])) for path in EXAMPLES]
    assert {s.framework for s in specs} == {"pytorch", "tensorflow"}
    assert any(s.model.type == "cnn" for s in specs)
    graphs = [s.model for s in specs if s.model.type == "graph"]
    assert any({"add", "batch_norm", "global_avg_pool"} <= {x.op for x in g.layers} for g in graphs)
    names = {path.name for path in EXAMPLES}
    assert {"lstm-rows-fashion-mnist.yaml", "transformer-rows-fashion-mnist.yaml"} <= names
    assert any(s.task == "regression" for s in specs)
    assert any(s.resources.replica_count == 2 for s in specs)
    assert any(s.early_stopping and s.regularization.l2 for s in specs)
    assert any(s.lr_scheduler and s.lr_scheduler.name == "step" for s in specs)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_a_valid_spec(path: Path) -> None:
    JobSpec.model_validate(load_spec(path, []))


def test_the_graph_guide_lists_every_op_and_the_worked_examples_numbers() -> None:
    guide = GRAPH_GUIDE.read_text()
    section = guide.split("\n## The model graph\n", 1)[1].split("\n## ", 1)[0]
    assert not [op for op in OPS if f"| `{op}` |" not in section], "an op missing from the table"
    spec = JobSpec.model_validate(load_spec(ROOT / "examples" / "residual-fashion-mnist.yaml", []))
    shape, classes = input_shape_and_classes(spec) or ((), 0)
    model = built_model(spec, model_input(spec, shape), classes)
    assert f'"parameters": {model.parameters}' in section  # the model_summary shown is current
    assert f'"flops_per_sample": {model.flops_per_sample}' in section
    for path in ("residual-fashion-mnist", "lstm-rows-fashion-mnist", "transformer-rows"):
        assert f"examples/{path}" in section


def test_deploy_guide_covers_the_production_topics() -> None:
    guide = (ROOT / "DEPLOY.md").read_text()
    for topic in (
        "nvidia-container-toolkit",
        "docker compose up",
        "pg_dump",
        "--profile flower",
        "epochal migrate",
        "EPOCHAL_WORKER_GPUS",
        "/metrics",
        "POSTGRES_PASSWORD",
        "REDIS_PASSWORD",
        "EPOCHAL_PRODUCTION",
        "--profile tls",
        "EPOCHAL_DOMAIN",
    ):
        assert topic in guide, topic


# RELIABILITY.md names, for each claim, the test that shows it: `test_name`, `tests/x.py`,
# `tests/x.py::test_name`, and the code that does it, `path.py` or `path.py::function`.
CITED_TEST = re.compile(r"`(?:([\w/]+\.py)::)?(test_\w+)`")
CITED_FILE = re.compile(r"`((?:app|worker|client|tests|tools|benchmarks|migrations)/[\w/]+\.py)")
CITED_FUNCTION = re.compile(r"`([\w/]+\.py)::(\w+)`")


def defined_tests() -> set[str]:
    """Every test function of the suite, by name."""
    found: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        found.update(re.findall(r"^\s*(?:async )?def (test_\w+)\(", path.read_text(), re.M))
    return found


def test_every_test_reliability_md_names_exists() -> None:
    text = (ROOT / "RELIABILITY.md").read_text()
    named = {name for _, name in CITED_TEST.findall(text)}
    assert len(named) >= 40  # the parser still finds what the document cites
    assert not named - defined_tests(), f"no such test: {sorted(named - defined_tests())}"


def test_every_file_and_function_reliability_md_names_exists() -> None:
    text = (ROOT / "RELIABILITY.md").read_text()
    files = set(CITED_FILE.findall(text))
    assert not {f for f in files if not (ROOT / f).is_file()}, "named files that do not exist"
    missing = [
        f"{path}::{name}"
        for path, name in set(CITED_FUNCTION.findall(text))
        if not (ROOT / path).is_file()
        or not re.search(rf"^\s*(?:async )?def {name}\(", (ROOT / path).read_text(), re.M)
    ]
    assert not missing, f"named functions that do not exist: {missing}"


# The project's documents stand alone: every pitfall a file cites by number ("P" and digits) has
# its entry in RELIABILITY.md, and nothing points at a document outside the repository.
TEXT_DIRS = ("app", "worker", "client", "tools", "tests", "benchmarks", "migrations", ".ci", "docs")
TEXT_SUFFIXES = {".py", ".md", ".yml", ".yaml", ".toml", ".ini", ".mako", ".js", ".html", ".css"}
SKIP_PARTS = {"__pycache__", ".venv", "node_modules", "build", "dist"}
CITATION = re.compile(r"\bP(\d{1,2})(?:-P(\d{1,2}))?\b")
ENTRY = re.compile(r"^\*\*P(\d{1,2})\. ", re.MULTILINE)
PITFALLS = "## Pitfalls this design avoids"
OUTSIDE = (
    re.compile(r"(?<![\w/.*-])(?:\.\./)*shared/"),
    re.compile(r"\breference/\w+\.md\b"),
    re.compile(r"\breliability [PR]\d", re.IGNORECASE),
    re.compile(r"\bDESIGN(\.md)? §"),
)
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def project_texts() -> dict[Path, str]:
    """Every source and document file of the project, by path."""
    paths = [p for p in ROOT.iterdir() if p.is_file() and p.suffix in TEXT_SUFFIXES]
    paths += [ROOT / name for name in ("Dockerfile", "Makefile", ".ci/run")]
    for top in TEXT_DIRS:
        paths += [p for p in (ROOT / top).rglob("*") if p.suffix in TEXT_SUFFIXES]
    keep = [p for p in paths if p.is_file() and not SKIP_PARTS & set(p.relative_to(ROOT).parts)]
    return {p: p.read_text(encoding="utf-8") for p in keep}


def cited_numbers(text: str) -> set[int]:
    """The pitfall numbers a text cites; a range cites each number in it."""
    cited: set[int] = set()
    for first, last in CITATION.findall(text):
        cited.update(range(int(first), int(last or first) + 1))
    return cited


def pitfall_entries() -> set[int]:
    """The pitfall numbers RELIABILITY.md has an entry for."""
    text = (ROOT / "RELIABILITY.md").read_text()
    assert PITFALLS in text
    return {int(n) for n in ENTRY.findall(text.split(PITFALLS, 1)[1])}


def citing_texts() -> dict[str, str]:
    """Every file that may cite a pitfall, RELIABILITY.md without its entries."""
    texts = {str(path.relative_to(ROOT)): text for path, text in project_texts().items()}
    texts["RELIABILITY.md"] = texts["RELIABILITY.md"].split(PITFALLS, 1)[0]
    return texts


def test_every_cited_pitfall_has_an_entry_in_reliability_md() -> None:
    entries, texts = pitfall_entries(), citing_texts()
    missing = {
        name: sorted(cited_numbers(text) - entries)
        for name, text in texts.items()
        if cited_numbers(text) - entries
    }
    assert not missing, f"cited without an entry in RELIABILITY.md: {missing}"
    cited = set().union(*map(cited_numbers, texts.values()))
    assert entries <= cited, f"entries nothing cites any more: {sorted(entries - cited)}"


def test_no_file_points_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for path, text in project_texts().items()
        for pattern in OUTSIDE
        for m in pattern.finditer(text)
    ]
    assert not found, found


# The documents say what is, not when or by whom it came to be: history stays in git.
HISTORY = re.compile(r"this\ssession|last\sround|this\sround|\bstop\s\d+|\bissue\s\d+")


@pytest.mark.parametrize("doc", ["RELIABILITY.md", "DEPLOY.md", "BENCHMARKS.md", "README.md"])
def test_no_document_narrates_its_history(doc: str) -> None:
    pages = [ROOT / doc] if doc != "README.md" else [ROOT / doc, *(ROOT / "docs").rglob("*.md")]
    found = [f"{p.relative_to(ROOT)}: {m}" for p in pages for m in HISTORY.findall(p.read_text())]
    assert not found, found


SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.MULTILINE)


def page_text(path: Path) -> str:
    """A Markdown file as the site renders it: each `--8<-- "FILE"` line replaced by FILE."""
    return SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text(), path.read_text())


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors for the headings of a Markdown text (outside code blocks)."""
    headings = re.findall(r"^#{1,6} (.+)$", FENCE.sub("", markdown), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


DOCS = ["README.md", "RELIABILITY.md", "DEPLOY.md", "BENCHMARKS.md", "client/README.md"]
DOCS += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_point_to_existing_files_and_headings(doc: str) -> None:
    source = ROOT / doc
    broken = []
    for target in LINK.findall(FENCE.sub("", page_text(source))):
        if re.match(r"[a-z]+:", target):
            continue  # a URL, not a file of the project
        path, _, fragment = target.partition("#")
        linked = (source.parent / path).resolve() if path else source
        if not linked.exists():
            broken.append(target)
        elif fragment and linked.suffix == ".md" and fragment not in anchors(page_text(linked)):
            broken.append(target)
    assert not broken, f"{doc}: {broken}"


BENCHMARK_QUOTE = re.compile(r'docs/benchmarks\.md,\s*#?\s*"([^"]+)"')


def test_code_that_points_to_the_benchmarks_names_a_heading_they_have() -> None:
    """A comment that sends the reader to a figure names a heading of docs/benchmarks.md that
    exists (a renamed section leaves no dangling pointer), never the old BENCHMARKS.md diary."""
    headings = set(re.findall(r"^#+ (.+)$", (ROOT / "docs/benchmarks.md").read_text(), re.M))
    quoted, stale = [], []
    for path in sorted(
        p for root in ("app", "worker", "client") for p in (ROOT / root).rglob("*.py")
    ):
        text = path.read_text()
        stale += [str(path.relative_to(ROOT))] if "BENCHMARKS.md" in text else []
        quoted += [(path.name, name) for name in BENCHMARK_QUOTE.findall(text)]
    assert quoted, "the pattern finds the code's pointers"
    assert not [q for q in quoted if q[1] not in headings], headings
    assert not stale, f"point to docs/benchmarks.md instead: {stale}"
