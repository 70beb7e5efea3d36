"""The base of every scenario model: unknown keys are errors (suggestions come from the loader)."""

from __future__ import annotations

__all__ = ["Strict"]

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Base of every scenario model. `extra='forbid'`: a misspelt key is an error, never ignored
    (the scenario loader turns it into ``unknown field 'x' (did you mean 'y'?)``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=True)
