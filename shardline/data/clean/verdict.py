"""What a cleaning rule answers: the text it keeps (or changes), or a `Drop` saying why it went.

Contract: a `Rule` maps a document's text to its kept text or a `Drop(rule, value, limit, detail)`;
this module is the one both the base rules (rules.py) and the rule sets built on them
(language.py, quality.py) import, so none of them imports another for the type.
"""

from __future__ import annotations

from typing import Callable, NamedTuple


class Drop(NamedTuple):
    """Why a rule removed a document: `rule` is the check's name (a rule set's checks are named
    `<set>.<field>`, e.g. gopher_quality.min_words), `value` what it measured, `limit` the setting."""

    rule: str
    value: float
    limit: float
    detail: str = ""  # what a number cannot say, e.g. the language detected


Rule = Callable[[str], "str | Drop"]
