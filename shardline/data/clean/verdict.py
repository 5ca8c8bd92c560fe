"""What a cleaning rule is and answers: the text it keeps (or changes), or a `Drop` saying why it
went; and its `RuleEntry`, how the registry knows it.

Contract: a `Rule` maps a document's text to its kept text or a `Drop(rule, value, limit, detail)`.
A `RuleEntry` is one key of params.yaml's `clean` section: the setting's type and pydantic `Field`
(default, bounds, documentation) and `make(value, index) -> Rule | None` (None: switched off).
Every rule module declares its entries next to its code and settings; `rules.RULES` orders
them. This module imports no rule, so every rule module (and the registry) can import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple


class Drop(NamedTuple):
    """Why a rule removed a document: `rule` is the check's name (a rule set's checks are named
    `<set>.<field>`, e.g. gopher_quality.min_words), `value` what it measured, `limit` the setting."""

    rule: str
    value: float
    limit: float
    detail: str = ""  # what a number cannot say, e.g. the language detected


Rule = Callable[[str], "str | Drop"]


@dataclass(frozen=True)
class RuleEntry:
    """One rule's place in the clean section. `make(value, index)`: the rule for the setting's
    value (`index`: the decontamination index's path), or None when the value switches it off;
    `make` None: a rule judged by the stage before the text rules (the URL blocklist).
    `reference`: the rule decides as datatrove does, so its parts' keys carry the reference."""

    key: str
    setting: Any  # the annotation of the section's field
    field: Any  # its pydantic FieldInfo
    make: Callable[[Any, "str | None"], "Rule | None"] | None = None
    reference: bool = False
