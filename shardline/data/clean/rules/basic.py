"""The basic cleaning rules: the transforms (normalize, strip_control, whitespace) and the length
and character filters (min_chars, max_chars, max_line_chars, max_repeated_line_fraction,
min_alpha_fraction, max_replacement_fraction), each a small callable `Document -> text | Drop`
that reads the document's text (a Drop removes the document and says which check removed it,
what it measured and the limit it broke), with its setting: one `RuleEntry` per key of the
clean section.

Contract: rules hold no state and are picklable (they run in worker processes). Their order
among all the rules is `shardline.data.clean.rules.registry.RULES`'s; transforms come first there so
that filters judge the text that will be kept.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from shardline.data.clean.kernels import lines as ls
from shardline.data.clean.verdict import Drop, RuleEntry
from shardline.data.document import Document

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
LETTER, SPACE = ls.LETTER, ls.SPACE  # what min_alpha_fraction counts, as re's own classes (lines.py)


@dataclass(frozen=True)
class Normalize:
    form: str
    name = "normalize"

    def __call__(self, doc: Document) -> str:
        text = doc.text
        return text if unicodedata.is_normalized(self.form, text) else unicodedata.normalize(self.form, text)


def strip_control(doc: Document) -> str:
    """Control characters other than \\t \\n \\r (CR is handled by the whitespace rule)."""
    text = doc.text
    return _CONTROL.sub("", text) if ls.line_stats(text)[7] else text  # most texts hold none


def whitespace(doc: Document) -> str:
    """CRLF and CR to LF, spaces and tabs before each LF out, at most three LFs in a row, then
    rstrip() and lstrip("\\n"); compiled (lines.whitespace: the regular expressions' result)."""
    return ls.whitespace(doc.text)


@dataclass(frozen=True)
class MinChars:
    n: int
    name = "min_chars"

    def __call__(self, doc: Document) -> "str | Drop":
        text = doc.text
        return text if len(text) >= self.n else Drop(self.name, len(text), self.n)


@dataclass(frozen=True)
class MaxChars:
    n: int
    name = "max_chars"

    def __call__(self, doc: Document) -> "str | Drop":
        text = doc.text
        return text if len(text) <= self.n else Drop(self.name, len(text), self.n)


@dataclass(frozen=True)
class MaxLineChars:
    n: int
    name = "max_line_chars"

    def __call__(self, doc: Document) -> "str | Drop":
        text = doc.text
        longest = ls.line_stats(text)[0]  # of text.split("\n")
        return text if longest <= self.n else Drop(self.name, longest, self.n)


@dataclass(frozen=True)
class RepeatedLines:
    """Fraction of non-blank lines that repeat an earlier line (boilerplate, logs, spam)."""

    limit: float
    name = "max_repeated_line_fraction"

    def __call__(self, doc: Document) -> "str | Drop":
        text = doc.text
        _, n, repeats, *_ = ls.line_stats(text)  # non-blank stripped lines, and repeats among them
        if not n:
            return text
        repeated = 1 - (n - repeats) / n
        return text if repeated <= self.limit else Drop(self.name, round(repeated, 4), self.limit)


@dataclass(frozen=True)
class AlphaFraction:
    limit: float
    name = "min_alpha_fraction"

    def __call__(self, doc: Document) -> "str | Drop":
        text = doc.text
        letters, spaces = ls.line_stats(text)[3:5]
        visible = len(text) - spaces
        if visible == 0 or letters / visible >= self.limit:
            return text
        return Drop(self.name, round(letters / visible, 4), self.limit)


@dataclass(frozen=True)
class ReplacementFraction:
    limit: float
    name = "max_replacement_fraction"

    def __call__(self, doc: Document) -> "str | Drop":
        text = doc.text
        share = ls.line_stats(text)[5] / len(text) if text else 0.0
        return text if share <= self.limit else Drop(self.name, round(share, 4), self.limit)


strip_control.name = "strip_control"  # type: ignore[attr-defined]
whitespace.name = "whitespace"  # type: ignore[attr-defined]


def _limit(rule):
    """make() of a filter whose setting is its limit: off when null."""
    return lambda v, _files: rule(v) if v is not None else None


NORMALIZE = RuleEntry("normalize", Literal["NFC", "NFKC", "none"],
                  Field("NFC", description="Unicode normalisation form applied first."),
                  lambda v, _files: Normalize(v) if v != "none" else None)
STRIP_CONTROL = RuleEntry("strip_control", bool,
                      Field(True, description="Remove control characters other than newline and tab."),
                      lambda v, _files: strip_control if v else None)
WHITESPACE = RuleEntry("whitespace", bool, Field(True, description="CRLF -> LF, strip trailing spaces per line, at most "
                                             "two consecutive blank lines, strip ends."),
                   lambda v, _files: whitespace if v else None)
MIN_CHARS = RuleEntry("min_chars", int | None, Field(64, ge=0, description="Drop documents shorter than this (characters, "
                                                 "after the transforms above)."), _limit(MinChars))
MAX_CHARS = RuleEntry("max_chars", int | None, Field(1_000_000, ge=1, description="Drop documents longer than this (a guard "
                                                 "against runaway records)."), _limit(MaxChars))
MAX_LINE_CHARS = RuleEntry("max_line_chars", int | None,
                       Field(2_000, ge=1, description="Drop documents with any line longer than this (minified or "
                             "binary-ish content)."), _limit(MaxLineChars))
MAX_REPEATED_LINE_FRACTION = RuleEntry(
    "max_repeated_line_fraction", float | None,
    Field(0.3, ge=0, le=1, description="Drop documents whose non-blank lines repeat more than this fraction "
          "(boilerplate)."), _limit(RepeatedLines))
MIN_ALPHA_FRACTION = RuleEntry(
    "min_alpha_fraction", float | None,
    Field(0.25, ge=0, le=1, description="Drop documents where letters are less than this fraction of non-whitespace "
          "characters."), _limit(AlphaFraction))
MAX_REPLACEMENT_FRACTION = RuleEntry(
    "max_replacement_fraction", float | None,
    Field(0.01, ge=0, le=1, description="Drop documents where U+FFFD (undecodable bytes) exceeds this fraction of "
          "characters."), _limit(ReplacementFraction))
