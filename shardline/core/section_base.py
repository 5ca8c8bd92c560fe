"""The base of every params.yaml section: frozen, unknown keys refused, each field's docstring
is its documentation (`shardline params` prints them). A boolean is never taken for a number
(pydantic would read `steps: true` as 1 and `max_bad_fraction: no` as 0.0, and YAML 1.1 makes
yes/no/on/off booleans): a field of numbers refuses one, naming it."""

from __future__ import annotations

import typing

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


def _wants_number(tp) -> bool:
    """Whether a value of annotation `tp` is a number and may not be a boolean."""
    args = typing.get_args(tp)
    if tp in (int, float):
        return True
    return bool(args) and typing.get_origin(tp) is not dict and bool not in args \
        and any(_wants_number(a) for a in args)


def _number_values(tp) -> bool:
    """Whether `tp` is a mapping (or an optional one) whose values are numbers: mix's weights."""
    maps = [a for a in (typing.get_args(tp) or (tp,)) if typing.get_origin(a) is dict] or \
        ([tp] if typing.get_origin(tp) is dict else [])
    return any(_wants_number(typing.get_args(m)[1]) for m in maps if len(typing.get_args(m)) == 2)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, value, info: ValidationInfo):
        tp = cls.model_fields[info.field_name].annotation
        if isinstance(value, bool) and _wants_number(tp):
            raise ValueError(f"a number is wanted, got {str(value).lower()} (YAML reads true/false, yes/no and "
                             "on/off as booleans)")
        if isinstance(value, dict) and _number_values(tp):
            for k, v in value.items():
                if isinstance(v, bool):
                    raise ValueError(f"{k}: a number is wanted, got {str(v).lower()} (YAML reads true/false, yes/no "
                                     "and on/off as booleans)")
        return value
