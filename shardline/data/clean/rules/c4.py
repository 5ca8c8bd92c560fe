"""C4's rule set (Raffel et al. 2020): datatrove 0.10.1's C4QualityFilter, with its setting (the
clean section's c4; false or null switches one check off) and registry entry.

Contract: as every rule set's (ruleset.py). C4 also transforms: it returns the text less the lines
its line checks remove, or Drop("c4.all_lines_removed", 0, 1); its check "c4" counts the bytes of
the lines removed (no document).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import Field

from shardline.core.section_base import _Section
from shardline.data.clean.kernels import words as wd
from shardline.data.clean.rules.ruleset import RuleSet
from shardline.data.clean.verdict import Drop, RuleEntry
from shardline.data.document import Document

_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")


class C4(_Section):
    """C4's heuristics (Raffel et al. 2020), datatrove's C4QualityFilter. Line checks remove lines
    (lines are stripped, kept lines joined by newlines); document checks drop the document. Per
    line, in datatrove's order: max_word_length, remove_citations, filter_no_terminal_punct,
    min_words_per_line, filter_lorem_ipsum, filter_javascript, filter_curly_bracket, filter_policy;
    a removed line meets no later check. Then min_num_sentences, over the lines kept."""

    remove_citations: bool = True
    """Delete Wikipedia-style citation marks ([1], [edit], [citation needed]) from every line."""
    filter_no_terminal_punct: bool = True
    """Remove lines that do not end in . ? ! " or ' (or that end in '...')."""
    min_num_sentences: int | None = Field(5, ge=0)
    """Drop documents with fewer sentences than this in the lines kept (spaCy's sentencizer, per line)."""
    min_words_per_line: int | None = Field(3, ge=0)
    """Remove lines with fewer whitespace-separated words than this."""
    max_word_length: int | None = Field(1000, ge=1)
    """Remove lines holding a word (whitespace-separated) longer than this many characters."""
    filter_lorem_ipsum: bool = True
    """Drop documents with 'lorem ipsum' (any case) in a line that survived the checks above."""
    filter_javascript: bool = True
    """Remove lines mentioning 'javascript' (any case)."""
    filter_curly_bracket: bool = True
    """Drop documents with '{' in a line that survived the checks above."""
    filter_policy: bool = True
    """Remove lines mentioning terms of use, privacy or cookie policies, or cookies in use."""


def _long_word(line: str, longest: int) -> bool:
    """Whether a word of `line` is longer than `longest`. Such a word fills an aligned block of
    (longest + 2) // 2 characters, so a line with a space in every block has none."""
    block = (longest + 2) // 2
    if all(line.find(" ", i, i + block) >= 0 for i in range(0, len(line), block)):
        return False
    return max(map(len, line.split())) > longest


@dataclass(frozen=True)
class C4Rule(RuleSet):
    cfg: C4
    name = "c4"
    FIELDS = ("max_word_length", "remove_citations", "filter_no_terminal_punct", "min_words_per_line",
              "filter_lorem_ipsum", "filter_javascript", "filter_curly_bracket", "filter_policy", "min_num_sentences")

    DROPS = ("filter_lorem_ipsum", "filter_curly_bracket", "min_num_sentences")  # the others remove lines

    @property
    def checks(self) -> tuple[str, ...]:
        """"c4" counts the lines removed (bytes; no document), then the checks that drop documents."""
        drops = tuple(c for c in super().checks if c.rpartition(".")[2] in self.DROPS)
        return (self.name, *drops, f"{self.name}.all_lines_removed")

    def __call__(self, doc: Document) -> str | Drop:
        text = doc.text
        c = self.cfg
        # a phrase the whole text lacks, no line has: most lines skip most checks. The text's ASCII,
        # lowered, holds every phrase str.lower() shows (only the Kelvin sign lowers to ASCII: "k")
        low = (text.lower() if "\u212a" in text else text).encode("ascii", "ignore").lower().decode()
        cite = c.remove_citations and "[" in text
        lorem = c.filter_lorem_ipsum and "lorem ipsum" in low
        script = c.filter_javascript and "javascript" in low
        curly = c.filter_curly_bracket and "{" in text
        policy = c.filter_policy and ("cookie" in low or "policy" in low or "terms of use" in low)
        longest, fewest, need = c.max_word_length, c.min_words_per_line, c.min_num_sentences or 0
        kept: list[str] = []
        sentences = 0
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if longest is not None and len(line) > longest and _long_word(line, longest):
                continue
            few = fewest is not None and len(line.split(None, fewest)) < fewest  # words before citations go
            if cite and "[" in line:
                line = _CITATION.sub("", line)
            if few or c.filter_no_terminal_punct and (not line.endswith((".", "?", "!", '"', "'"))
                                                       or line.endswith("...")):
                continue
            line_low = line.lower() if lorem or script or policy else ""
            if lorem and "lorem ipsum" in line_low:
                return self.drop("filter_lorem_ipsum", 1, 0, f"line {number}: {line[:80]}")
            if script and "javascript" in line_low:
                continue
            if curly and "{" in line:
                return self.drop("filter_curly_bracket", 1, 0, f"line {number}: {line[:80]}")
            if policy and any(p in line_low for p in _POLICY):
                continue
            if sentences < need:  # counted only as far as the check needs
                sentences += wd.sentences(line)
            kept.append(line)
        if sentences < need:
            return self.drop("min_num_sentences", sentences, need)
        if not (out := "\n".join(kept).strip()):
            return self.drop("all_lines_removed", 0, 1)
        return text if out == text else out


C4_QUALITY = RuleEntry("c4", C4 | None,
                   Field(None, description="C4's filter: removes javascript, policy and unterminated lines; drops "
                         "lorem ipsum, curly braces."),
                   lambda v, _files: C4Rule(v) if v is not None else None, reference=True)
