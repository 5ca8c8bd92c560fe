"""The base of every params.yaml section: frozen, unknown keys refused, each field's docstring
is its documentation (`shardline params` prints them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
