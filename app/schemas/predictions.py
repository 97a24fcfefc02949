"""Request and answer of POST /v1/jobs/{id}/predict."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class PredictRequest(BaseModel):
    """Raw rows in the shape of the model card's input (pixels 0..255, digits 0..16, …)."""

    inputs: list[Any] = Field(
        description="rows, each in the model card's row shape: 8 rows of 8 values 0..16 for "
        "digits ([[[0, 0, 5, 13, 9, 1, 0, 0], … 8 rows], …]), 28 rows of 28 pixels 0..255 "
        "for (Fashion-)MNIST, an upload's x.shape[1:]; or send an .npy body",
        min_length=1,
    )


class PredictionsPublic(BaseModel):
    """One prediction per row; classification adds the softmax of the logits."""

    predictions: list[Any] = Field(
        description="classification: the class (its name when the data set names them, else "
        "its index); regression: the value (a list per row for several outputs)"
    )
    probabilities: list[list[float]] | None = Field(
        None, description="classification only: per row, the probability of each class"
    )
