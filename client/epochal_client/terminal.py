"""What every client command shares: the consoles, the connection with its error handling,
and reading a spec file with `--set` overrides."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console

from epochal_client.client import ApiError, Client

# Piped output is for grep and scripts: wide rows, never wrapped at 80 columns.
console = Console(width=None if sys.stdout.isatty() else 200)
errors = Console(stderr=True)


@contextmanager
def connect() -> Iterator[Client]:
    """A client; an API error becomes its message on stderr and exit code 1."""
    try:
        with Client() as client:
            yield client
    except ApiError as exc:
        errors.print(f"[red]error:[/] {exc}", markup=True, highlight=False)
        for item in exc.errors:
            errors.print(f"  {item.get('field') or 'body'}: {item.get('msg')}", highlight=False)
        raise typer.Exit(1) from None


def load_spec(path: Path, overrides: list[str]) -> dict[str, Any]:
    """A spec from JSON or YAML, with `a.b.c=VALUE` overrides (VALUE read as JSON or YAML)."""
    try:
        spec = yaml.safe_load(path.read_text())  # YAML is a superset of JSON
    except (OSError, yaml.YAMLError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}") from exc
    if not isinstance(spec, dict):
        raise typer.BadParameter(f"{path} must hold a JSON or YAML object")
    for item in overrides:
        dotted, sep, raw = item.partition("=")
        if not sep or not dotted:
            raise typer.BadParameter(f"--set {item!r}: write FIELD.PATH=VALUE")
        *parents, leaf = dotted.split(".")
        node = spec
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise typer.BadParameter(f"--set {item!r}: {part} is not an object")
        node[leaf] = parse_value(raw)
    return spec


def parse_value(raw: str) -> Any:
    """JSON when it is JSON (3e-4 is a number, [128, 64] a list), else a YAML scalar."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return yaml.safe_load(raw)
