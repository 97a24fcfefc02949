"""Every op's implementation, found once in this package (a module with OP and apply): adding
an op is a step model in app.schemas.augment and a module here."""

from __future__ import annotations

import importlib
import pkgutil

from app.schemas.augment import STEPS
from worker.training.data.augment.base import Apply


def _discover() -> dict[str, Apply]:
    from worker.training.data import augment as package

    found: dict[str, Apply] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_") or info.name in ("base", "registry"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        found[module.OP] = module.apply
    missing = set(STEPS) - set(found)
    if missing:
        raise RuntimeError(f"augmentation ops without an implementation: {sorted(missing)}")
    return found


OPS: dict[str, Apply] = _discover()
