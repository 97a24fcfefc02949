"""The HTTP API's committed OpenAPI document, kept equal to the one the app serves.

python -m tools.openapi_compat --write  rewrite docs/references/openapi.json from the app;
                                        refused while a breaking change has no CHANGELOG.md entry
python -m tools.openapi_compat          exit 1 if the committed document is not the served one
                                        (tests check the same), listing the breaking changes

A breaking change (tools.openapi_diff) is one line, and that line is its id: CHANGELOG.md lets
it through by quoting it. Reviewers see every change to the API as a diff of the document.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from app.main import create_app
from tools.openapi_diff import breaking_changes

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = ROOT / "docs" / "references" / "openapi.json"
CHANGELOG = ROOT / "CHANGELOG.md"
WRITE = "python -m tools.openapi_compat --write"
STALE = f"{DOCUMENT.relative_to(ROOT)} is not the served API: run {WRITE}"


def served() -> dict[str, Any]:
    """The document the app serves at /openapi.json."""
    return create_app().openapi()


def dumps(document: dict[str, Any]) -> str:
    """The document as committed: sorted keys, so a diff shows only what changed."""
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def unrecorded(changes: list[str], changelog: str) -> list[str]:
    """The breaking changes the changelog does not quote (whole: `property x` is not `xy`)."""
    return [c for c in changes if not re.search(rf"(?<!\w){re.escape(c)}(?!\w)", changelog)]


def report(changes: list[str], changelog: str) -> str:
    """The breaking changes, each marked where the changelog already quotes it."""
    if not changes:
        return "no breaking changes"
    missing = unrecorded(changes, changelog)
    lines = [f"breaking changes; quote each unrecorded one in {CHANGELOG.name} under Unreleased:"]
    return "\n".join(lines + [f"  {c}{'' if c in missing else '  (recorded)'}" for c in changes])


def check(document: Path, changelog: Path, current: dict[str, Any], write: bool) -> int:
    """0 when `document` holds `current` (after writing it, with `write` and nothing
    unrecorded); 1, saying why, when it does not."""
    text = document.read_text() if document.exists() else "{}"
    if text == dumps(current):
        return 0
    changes = breaking_changes(json.loads(text), current)
    log = changelog.read_text()
    if not write:
        print(f"{STALE}\n{report(changes, log)}", file=sys.stderr)
        return 1
    if unrecorded(changes, log):
        print(f"{report(changes, log)}\n{document.name} not written", file=sys.stderr)
        return 1
    document.write_text(dumps(current))
    print(f"wrote {document}", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    return check(DOCUMENT, CHANGELOG, served(), write="--write" in argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
