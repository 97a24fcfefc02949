"""Dotted paths into a job spec, as a sweep's parameters name them: whether a path names a
field, and the spec with a value put at a path (a number indexes a list:
model.layers.3.filters)."""

from __future__ import annotations

import copy
import json
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel

from app.schemas.job_spec import JobSpec


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    """The Pydantic models an annotation can hold (through unions and Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from _models_in(typing.get_args(annotation)[0])
    elif origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from _models_in(arg)


def _items_in(annotation: Any) -> Iterator[Any]:
    """The item types of the lists an annotation can hold (through unions and Annotated)."""
    origin = typing.get_origin(annotation)
    if origin is list:
        yield typing.get_args(annotation)[0]
    elif origin is typing.Annotated:
        yield from _items_in(typing.get_args(annotation)[0])
    elif origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from _items_in(arg)


def path_exists(path: str, model: type[BaseModel] = JobSpec) -> bool:
    """Whether `a.b.c` names a field of the job spec (any member of a union counts; a number
    indexes a list: model.layers.3.filters)."""
    head, _, rest = path.partition(".")
    field = model.model_fields.get(head)
    return field is not None and _reaches(rest, field.annotation)


def _reaches(rest: str, annotation: Any) -> bool:
    if not rest:
        return True
    head, _, tail = rest.partition(".")
    if head.isdigit():
        return any(_reaches(tail, item) for item in _items_in(annotation))
    return any(path_exists(rest, sub) for sub in _models_in(annotation))


class PathError(ValueError):
    """A path that indexes past the end of a list, or into something that is not one."""


def _put(node: Any, path: str, value: Any) -> None:
    """Set `value` at the dotted path in place (missing or null sections made; a number
    indexes an existing list, else PathError)."""
    parts = path.split(".")
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if part.isdigit() or isinstance(node, list):
            key: Any = _index(node, part, ".".join(parts[:depth]))
        else:
            key = part
            if not last and not isinstance(node.get(part), dict | list):
                node[part] = {}
        if last:
            node[key] = copy.deepcopy(value)
        else:
            node = node[key]


def set_path(spec: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of spec with `value` at the dotted path (missing or null sections made; a number
    indexes an existing list, else PathError)."""
    out = copy.deepcopy(dict(spec))
    _put(out, path, value)
    return out


def _index(node: Any, part: str, where: str) -> int:
    if not isinstance(node, list):
        raise PathError(f"{where} is not a list in the base spec, so {part} indexes nothing")
    if not part.isdigit():
        raise PathError(f"{where} is a list; index it with a number, not {part!r}")
    if int(part) >= len(node):
        raise PathError(
            f"{where} has {len(node)} entries (0 to {len(node) - 1}); there is no entry {part}"
        )
    return int(part)


def value_at(spec: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path of a spec (numbers index lists); None where there is none."""
    node: Any = spec
    for part in path.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            return None
    return node


def apply_params(base: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """The trial's spec: base with each parameter's value in place (paths sorted: parents first).
    The base is a spec as JSON, copied through JSON: a check builds up to ~1,500 of these, and
    the json module's C encoder and decoder copy plain dicts and lists without deepcopy's
    per-object memo and dispatch in Python."""
    spec: dict[str, Any] = json.loads(json.dumps(base))
    for path in sorted(params):
        _put(spec, path, params[path])
    return spec
