"""What the quality rule sets share: datatrove 0.10.1's GopherRepetitionFilter,
GopherQualityFilter, C4QualityFilter and FineWebQualityFilter (gopher.py, c4.py, fineweb.py), each
one cleaning rule with several checks, with datatrove's English word and sentence splitting
(words.py: spaCy's, the same answers).

Contract: a set's `name` is its key in the clean section; `checks` are its enabled checks,
"<set>.<field>" in the order they run (".<n>" added for an n-gram pair:
gopher_repetition.top_n_grams.2). It returns the text, or the first failing check's
Drop(check, measured, limit) (ratios rounded to 4 places, as in basic.py). Rules are frozen
dataclasses holding only their settings; their order is `rules.RULES`'s (FineWeb's:
gopher_repetition, gopher_quality, c4, fineweb).

The reference is datatrove 0.10.1 with its default English word tokenizer (spaCy's blank English,
which needs no download): its definitions, comparisons, splits, strips and order, measured side by
side in tests/unit/test_reference.py and bench.curation. Where it differs (docs/cleaning.md lists each
with an example):
- an empty text (or, for FineWeb, one of blank lines only) is dropped as `<set>.empty` where
  datatrove drops it without a check; where datatrove divides by zero (a text with no words and
  min_doc_words off) the share is 0.
- a limit of 0 is a limit here; datatrove reads 0 as off (`if self.max_symbol_word_ratio and ...`).
Speed: words are positions in the text's code points (words.analyse), and every measure over
them is compiled (textstats.py), so a document passes without a Python object per word. Values
stay exact: hashes only choose where to look, and n-grams are compared by word or character.
"""

from __future__ import annotations

from typing import Any

from shardline.data.clean.kernels import words as wd
from shardline.data.clean.verdict import Drop

REFERENCE = "datatrove 0.10.1, spaCy English words"  # in the clean parts' keys: a new reference rebuilds them


def words(text: str) -> wd.Words:
    """The text's words, shared by the sets that read the same text (datatrove caches them too)."""
    return wd.analyse(text)


class RuleSet:
    """What the four rules share: their checks' names and their Drops."""

    name: str
    cfg: Any  # the set's settings
    FIELDS: tuple[str, ...] = ()

    @property
    def checks(self) -> tuple[str, ...]:
        return tuple(f"{self.name}.{f}" for f in self.FIELDS if getattr(self.cfg, f) not in (None, False))

    def drop(self, check: str, value: float, limit: float, detail: str = "") -> Drop:
        return Drop(f"{self.name}.{check}", round(value, 4), limit, detail)
