"""FineWeb's own rule set (Penedo et al. 2024): datatrove 0.10.1's FineWebQualityFilter, with its
setting (the clean section's fineweb; null switches one check off) and registry entry.

Contract: as every rule set's (ruleset.py); a text of blank lines only is dropped as
`fineweb.empty`.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import methodcaller

from pydantic import Field

from shardline.core.section_base import _Section
from shardline.data.clean.rules import ruleset as rs
from shardline.data.clean.kernels import textstats as ts
from shardline.data.clean.rules.ruleset import RuleSet
from shardline.data.clean.verdict import Drop, RuleEntry
from shardline.data.document import Document

_STOPS = tuple(ts.TERMINAL)  # what ends a line for FineWeb (datatrove 0.10's stop_chars)


class FineWeb(_Section):
    """FineWeb's own heuristics (Penedo et al. 2024), datatrove's FineWebQualityFilter. Lines are
    split on newlines, blank ones left out, the rest not stripped."""

    line_punct_thr: float | None = Field(0.12, ge=0, le=1)
    """Drop documents where the share of lines ending in terminal punctuation ('.', '!', '?' and
    their forms in 156 other scripts' characters, datatrove's list) is below this."""
    line_punct_exclude_zero: bool = False
    """Keep documents where no line at all ends in punctuation (line_punct_thr then spares them)."""
    short_line_thr: float | None = Field(0.67, ge=0, le=1)
    """Drop documents where the share of lines of at most short_line_length characters is above
    this."""
    short_line_length: int = Field(30, ge=0)
    """The longest line (characters) that short_line_thr counts as short."""
    char_duplicates_ratio: float | None = Field(0.01, ge=0, le=1)
    """Drop documents where lines that repeat an earlier line hold more than this share of the
    characters (newlines not counted)."""
    new_line_ratio: float | None = Field(0.3, ge=0)
    """Drop documents with more newlines per word (as gopher_quality's words) than this (lists and menus)."""


@dataclass(frozen=True)
class FineWebRule(RuleSet):
    cfg: FineWeb
    name = "fineweb"
    FIELDS = ("line_punct_thr", "short_line_thr", "char_duplicates_ratio", "new_line_ratio")

    @property
    def checks(self) -> tuple[str, ...]:
        return (f"{self.name}.empty", *super().checks)

    def __call__(self, doc: Document) -> str | Drop:
        text = doc.text
        c = self.cfg
        if not (lines := [line for line in text.split("\n") if line.strip()]):
            return self.drop("empty", 0, 1)
        if c.line_punct_thr is not None and \
                (share := sum(map(methodcaller("endswith", _STOPS), lines)) / len(lines)) < c.line_punct_thr \
                and not (share == 0 and c.line_punct_exclude_zero):
            return self.drop("line_punct_thr", share, c.line_punct_thr)
        if c.short_line_thr is not None and \
                (share := sum(map(c.short_line_length.__ge__, map(len, lines))) / len(lines)) > c.short_line_thr:
            return self.drop("short_line_thr", share, c.short_line_thr)
        if c.char_duplicates_ratio is not None and \
                (share := ts.duplicates(lines)[1] / (len(text) - text.count("\n"))) > c.char_duplicates_ratio:
            return self.drop("char_duplicates_ratio", share, c.char_duplicates_ratio)
        if c.new_line_ratio is not None and (share := text.count("\n") / rs.words(text).starts.size) > c.new_line_ratio:
            return self.drop("new_line_ratio", share, c.new_line_ratio)
        return text


FINEWEB = RuleEntry("fineweb", FineWeb | None,
                Field(None, description="FineWeb's extras: line-ending punctuation, short lines, duplicate-line "
                      "characters."),
                lambda v, _files: FineWebRule(v) if v is not None else None, reference=True)
