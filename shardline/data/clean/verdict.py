"""What a cleaning rule is and answers: the text it keeps (or changes), or a `Drop` saying why it
went; and its `RuleEntry`, how the registry knows it.

Contract: a `Rule` is called with the whole `Document` (text, id, url, metadata:
shardline/data/document.py) and answers keep, the document's text (a transform: its new
text), or drop, a `Drop(rule, value, limit, detail)`. That answer is the rule's one decision:
the clean stage and `shardline explain` both get it through `rules.apply`. A `RuleEntry` is
one key of params.yaml's `clean` section: the setting's type and pydantic `Field` (default,
bounds, documentation) and `make(value, files) -> Rule | None` (None: switched off; `files`:
the files rules read besides the text, `inputs.Inputs`: the URL blocklist, the decontamination
index). Every rule module declares its entries next to its code and settings, a plug-in's
distribution under its "shardline.rules" entry points (docs/extending.md); `rules.RULES` orders
them. This module imports no rule, so every rule module (and the registry) can import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

if TYPE_CHECKING:
    from shardline.data.document import Document


class Drop(NamedTuple):
    """Why a rule removed a document: `rule` is the check's name (a rule set's checks are named
    `<set>.<field>`, e.g. gopher_quality.min_words), `value` what it measured, `limit` the setting."""

    rule: str
    value: float
    limit: float
    detail: str = ""  # what a number cannot say, e.g. the language detected


Rule = Callable[["Document"], "str | Drop"]


@dataclass(frozen=True)
class RuleEntry:
    """One rule's place in the clean section. `make(value, files)`: the rule for the setting's
    value, or None when the value switches it off (`files`: an `inputs.Inputs`, whose
    `blocklist` and `index` are the URL blocklist and the decontamination index; None where no
    files were resolved). `reference`: the rule decides as datatrove does, so its parts' keys
    carry the reference. `origin`: a plug-in's distribution and version, set when it is loaded
    (its parts' keys carry it: a new release of the plug-in cleans them again); empty for the
    built-in rules, whose code the clean stage's CODE_VERSION versions."""

    key: str
    setting: Any  # the annotation of the section's field
    field: Any  # its pydantic FieldInfo
    make: Callable[[Any, Any], "Rule | None"]
    reference: bool = False
    origin: str = ""
