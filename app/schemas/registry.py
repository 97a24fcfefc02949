"""Kinds found by scanning a package, and the spec field that picks one of them by name.

Layer ops, optimizers and learning-rate schedules are each a package with one module per kind:
adding a kind is adding a module. A kind is a spec model whose `key` field is a Literal naming
it; the union of a package's kinds is told apart by that field, and a name the package does not
hold is refused with the names it does, never passed on to a default.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Annotated, Any, TypeVar, Union

from pydantic import BaseModel, BeforeValidator, Field

K = TypeVar("K", bound=BaseModel)


def discover(
    package: ModuleType, base: type[K], key: str, skip: Iterable[str] = ()
) -> dict[str, type[K]]:
    """{name: kind} of every subclass of `base` defined in the package's modules, by name.

    Modules starting with `_` (helpers shared by a family) and those named in `skip` (the
    package's own base and registry) hold no kinds.
    """
    found: dict[str, type[K]] = {}
    skipped = set(skip)
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_") or info.name in skipped:
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, base)
                and value is not base
                and value.__module__ == module.__name__
            ):
                name = value.model_fields[key].default
                if name in found:
                    raise RuntimeError(f"two kinds are called {name!r}")
                found[name] = value
    return dict(sorted(found.items()))


def kind_union(kinds: Mapping[str, type[BaseModel]], what: str, default: str | None = None) -> Any:
    """The spec type holding one of `kinds`, chosen by its `name` field (`default` if omitted).

    A field that only other kinds have is named with the kinds it applies to, and why where
    the kind that owns it says (its `field_hints`). Given at its default it is dropped instead:
    specs stored when the kinds shared one model, every field written out, keep validating.
    """
    hints: dict[str, str] = {}
    for kind in kinds.values():
        hints.update(getattr(kind, "field_hints", {}))

    def check(value: Any) -> Any:
        if not isinstance(value, dict):
            return value  # a model instance, or something the union itself refuses
        name = value.get("name", default)
        if not isinstance(name, str) or name not in kinds:
            known = ", ".join(kinds)
            if name is None:
                raise ValueError(f"{what} needs a name: one of {known}")
            raise ValueError(f"unknown {what} {name!r}: choose one of {known}")
        kept = {"name": name}
        for field, given in value.items():
            owners = [n for n, kind in kinds.items() if field in kind.model_fields]
            if field in kinds[name].model_fields or not owners:
                kept[field] = given  # its own, or unknown to all: the model's own error
            elif not _is_default(given, kinds[owners[0]].model_fields[field].default):
                hint = f": {hints[field]}" if field in hints else ""
                raise ValueError(f"{field} applies to {_listed(owners)}, not {name}{hint}")
        return kept

    return Annotated[
        Union[tuple(kinds.values())],  # noqa: UP007 - a runtime tuple of kinds
        Field(discriminator="name"),
        BeforeValidator(check),
    ]


def _is_default(given: Any, default: Any) -> bool:
    """Equal to the default and of its JSON kind: `false` is not a momentum of 0."""
    return given == default and isinstance(given, bool) == isinstance(default, bool)


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
