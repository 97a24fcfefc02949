"""The base of every spec model: strict, frozen, unknown fields rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """`true` is not an epoch count and "0.1" is not a number; JSON numbers still are."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
