"""Every op's implementation, found once in this package (a module with OP and apply, and for a
deterministic op `onnx`, its nodes in model.onnx): adding an op is a step model in
app.schemas.augment and a module here."""

from __future__ import annotations

import importlib
import pkgutil

from app.schemas.augment import STEPS
from worker.training.data.augment.base import Apply, Emit


def _discover() -> tuple[dict[str, Apply], dict[str, Emit]]:
    from worker.training.data import augment as package

    found: dict[str, Apply] = {}
    exports: dict[str, Emit] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_") or info.name in ("base", "registry"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        found[module.OP] = module.apply
        if hasattr(module, "onnx"):
            exports[module.OP] = module.onnx
    missing = set(STEPS) - set(found)
    if missing:
        raise RuntimeError(f"augmentation ops without an implementation: {sorted(missing)}")
    # What evaluation applies, model.onnx must repeat: a deterministic op needs its nodes.
    unexported = {op for op, kind in STEPS.items() if not kind.random} - set(exports)
    if unexported:
        raise RuntimeError(f"deterministic augmentation ops without onnx: {sorted(unexported)}")
    return found, exports


OPS, EXPORTS = _discover()
