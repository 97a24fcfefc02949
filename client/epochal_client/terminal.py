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
    return with_sets(spec, overrides)


def with_sets(spec: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`spec` with each `a.b.c=VALUE` of --set in place (VALUE read as JSON or YAML)."""
    for item in overrides:
        dotted, sep, raw = item.partition("=")
        if not sep or not dotted or "" in dotted.split("."):
            raise typer.BadParameter(f"--set {item!r}: write FIELD.PATH=VALUE")
        try:
            set_path(spec, dotted.split("."), parse_value(raw))
        except (KeyError, TypeError) as exc:
            raise typer.BadParameter(f"--set {item!r}: {exc.args[0]}") from None
    return spec


def set_path(node: Any, parts: list[str], value: Any) -> None:
    """Set `value` at a dotted path: a key with dots in it (a sweep's `optimizer.learning_rate`)
    is matched whole, a number indexes a list, a missing object is made."""
    key, rest = _step(node, parts)
    if not rest:
        node[key] = value
        return
    child = node.setdefault(key, {}) if isinstance(node, dict) else node[key]
    if not isinstance(child, dict | list):
        raise TypeError(f"{key} is not an object")
    set_path(child, rest, value)


def _step(node: dict[str, Any] | list[Any], parts: list[str]) -> tuple[Any, list[str]]:
    """The key or index that `parts` begins with in `node`, and the parts after it."""
    if isinstance(node, list):
        if not (parts[0].isdigit() and int(parts[0]) < len(node)):
            raise KeyError(f"{parts[0]} is not an index of a list of {len(node)}")
        return int(parts[0]), parts[1:]
    key = _longest_key(node, parts)
    return key, parts[len(key.split(".")) :]


def _longest_key(node: dict[str, Any], parts: list[str]) -> str:
    """The longest run of `parts` joined with dots that is a key of `node`, else the first part."""
    for size in range(len(parts), 1, -1):
        if (joined := ".".join(parts[:size])) in node:
            return joined
    return parts[0]


def parse_value(raw: str) -> Any:
    """JSON when it is JSON (3e-4 is a number, [128, 64] a list), else a YAML scalar."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return yaml.safe_load(raw)
