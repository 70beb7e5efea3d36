"""The base of every scenario model: unknown keys are errors (suggestions come from the loader),
and a boolean is never read as a number."""

from __future__ import annotations

__all__ = ["Strict"]

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, model_validator


def _takes_bool(annotation: Any) -> bool:
    """Whether a field of this type may hold a boolean (a bool field, or a union with one)."""
    if annotation is bool or annotation is Any:
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return _takes_bool(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return any(_takes_bool(a) for a in get_args(annotation))
    if origin is Literal:
        return any(isinstance(a, bool) for a in get_args(annotation))
    return False


def _numeric(annotation: Any) -> bool:
    """Whether a field of this type takes a number (int or float, maybe among others)."""
    if annotation in (int, float):
        return True
    origin = get_origin(annotation)
    if origin is Annotated or origin in (Union, types.UnionType):
        return any(_numeric(a) for a in get_args(annotation))
    return False


class Strict(BaseModel):
    """Base of every scenario model. `extra='forbid'`: a misspelt key is an error, never ignored
    (the scenario loader turns it into ``unknown field 'x' (did you mean 'y'?)``).

    A boolean where a number belongs (``count: true``) is an error too: pydantic's lax mode
    would read it as 1, YAML makes it easy to write (``yes``, ``on``), and nobody means it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=True)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_as_number(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name, field in cls.model_fields.items():
            key = field.alias if field.alias in data else name
            value = data.get(key)
            if (
                isinstance(value, bool)
                and _numeric(field.annotation)
                and not _takes_bool(field.annotation)
            ):
                raise ValueError(f"{key}: {value!r} is a boolean, not a number; write a number")
        return data
