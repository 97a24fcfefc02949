"""The shell and Python blocks of the Markdown docs, and the `<!-- no-test: reason -->` comment
that, on the line right before a block, says why a test cannot run it here."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNNABLE = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python", "py": "python"}
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")
NO_TEST = re.compile(r"^\s*<!--\s*no-test:(?P<reason>.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts, its language, its code, why it is skipped (if so)."""

    path: Path
    line: int
    lang: str
    code: str
    no_test: str | None

    @property
    def name(self) -> str:
        """`docs/guide/cli.md:12`: the file (from the repository root) and the fence's line."""
        where = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{where}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every sh/bash/python fenced block of a Markdown file, in order."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = _closing(lines, index, opening["indent"])
        lang = RUNNABLE.get(opening["lang"].lower())
        if lang is not None:
            body = [line.removeprefix(opening["indent"]) for line in lines[index + 1 : end]]
            code = "\n".join(body) + "\n"
            found.append(Block(path, index + 1, lang, code, _reason(lines, index)))
        index = end + 1
    return found


def _closing(lines: list[str], start: int, indent: str) -> int:
    """The line of the fence that closes the one opened at `start`."""
    for index in range(start + 1, len(lines)):
        if lines[index].strip() == "```" and lines[index].startswith(indent):
            return index
    raise ValueError(f"the block at line {start + 1} is never closed")


def _reason(lines: list[str], fence: int) -> str | None:
    """The no-test reason on the nearest non-blank line above the fence, if it is one."""
    for index in range(fence - 1, -1, -1):
        if lines[index].strip():
            marker = NO_TEST.match(lines[index])
            return marker["reason"].strip() if marker else None
    return None
