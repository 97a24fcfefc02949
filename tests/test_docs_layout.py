"""The Layout section of docs/architecture.md against the tree: each package of app/, worker/
and the client names exactly its modules, and every path the section names exists.

The section is a tree: a name per line, two spaces deeper per level, its description from
column 22 on (continued on lines indented that far). A package's modules are its child lines
(a child folder that is not a package, like static/, is data) plus the names its description
lists, `name (gloss), name, ...`: after the first colon outside parentheses, or the whole
description of a package without child lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKED_ROOTS = ("app", "worker", "client")
DESCRIPTION_COLUMN = 22
BUILD_OUTPUT = {"build", "dist", "__pycache__"}


@dataclass
class Entry:
    """One line of the tree (with its continuation lines)."""

    path: Path
    description: str
    children: list[str] = field(default_factory=list)


def layout_block(page: str) -> list[str]:
    """The lines of the text block under the page's `## Layout` heading."""
    section = page.split("\n## Layout\n", 1)[1]
    return section.split("```text\n", 1)[1].split("\n```", 1)[0].splitlines()


def parse_tree(lines: list[str]) -> dict[Path, Entry]:
    """Every entry by its path relative to the repository root."""
    entries: dict[Path, Entry] = {}
    stack: list[Path] = []
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        if indent >= DESCRIPTION_COLUMN:
            entries[stack[-1]].description += " " + line.strip()
            continue
        assert indent % 2 == 0, f"Layout: odd indent in {line!r}"
        name, _, description = line.strip().partition(" ")
        depth = indent // 2
        assert depth <= len(stack), f"Layout: {line!r} is deeper than its parent"
        del stack[depth:]
        path = (stack[-1] if stack else Path()) / name.rstrip("/")
        if stack:
            entries[stack[-1]].children.append(name.rstrip("/").removesuffix(".py"))
        entries[path] = Entry(path, description.strip())
        stack.append(path)
    return entries


def split_outside_parentheses(text: str, separator: str) -> list[str]:
    """`text` cut at each `separator` that no parenthesis encloses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def named_modules(entry: Entry) -> list[str]:
    """The module names a package's description lists (see the module docstring)."""
    head, *rest = split_outside_parentheses(entry.description, ":")
    if rest:
        listing = ":".join(rest)
    elif entry.children:
        return []  # the description is prose; the child lines are the modules
    else:
        listing = head
    items = [item.strip() for item in split_outside_parentheses(listing, ",")]
    return [item.split("(")[0].split()[0] for item in items if item]


def modules_of(package: Path) -> set[str]:
    """A package's public modules and subpackages (`_` names are private helpers)."""
    files = {p.stem for p in package.glob("*.py") if not p.name.startswith("_")}
    return files | {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}


def packages() -> list[Path]:
    """Every Python package under the checked roots, relative to the repository root."""
    found = []
    for root in CHECKED_ROOTS:
        for init in sorted((ROOT / root).rglob("__init__.py")):
            package = init.parent.relative_to(ROOT)
            if not BUILD_OUTPUT & set(package.parts):  # a wheel build's copy, not source
                found.append(package)
    return found


ARCHITECTURE = ROOT / "docs" / "architecture.md"
TREE = parse_tree(layout_block(ARCHITECTURE.read_text()))


def test_every_path_the_layout_names_exists() -> None:
    missing = [str(path) for path in TREE if not (ROOT / path).exists()]
    assert not missing, f"{ARCHITECTURE.name}'s Layout names what does not exist: {missing}"


@pytest.mark.parametrize("package", packages(), ids=str)
def test_each_package_names_exactly_its_modules(package: Path) -> None:
    assert package in TREE, f"{ARCHITECTURE.name}'s Layout has no line for {package}/"
    entry = TREE[package]
    data_dirs = [c for c in entry.children if not (ROOT / package / c / "__init__.py").exists()]
    data_dirs = [c for c in data_dirs if (ROOT / package / c).is_dir()]  # static/: not code
    named = named_modules(entry) + [c for c in entry.children if c not in data_dirs]
    doubled = sorted({name for name in named if named.count(name) > 1})
    assert not doubled, f"{package}/ names these twice: {doubled}"
    actual = modules_of(ROOT / package)
    assert not actual - set(named), f"{package}/ leaves out {sorted(actual - set(named))}"
    assert not set(named) - actual, f"{package}/ names no such module {sorted(set(named) - actual)}"


def test_the_parser_reads_lists_glosses_and_child_lines() -> None:
    tree = parse_tree(
        [
            "pkg/                  the thing: a (gloss, with a comma), b,",
            "                      c",
            "  sub/                x, y (why: because)",
            "  m.py                prose, not a list",
        ]
    )
    assert named_modules(tree[Path("pkg")]) == ["a", "b", "c"]
    assert tree[Path("pkg")].children == ["sub", "m"]
    assert named_modules(tree[Path("pkg/sub")]) == ["x", "y"]
