"""params.yaml's quality rule sets (the `clean` section's gopher_repetition, gopher_quality, c4,
fineweb): datatrove 0.10.1's filters, with its defaults. One frozen model per
set; the docstring under a field is its documentation. Null (or false) switches one check off;
what the checks measure, and where they differ from datatrove: shardline.data.quality.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from shardline.core.section_base import _Section

_N = Annotated[int, Field(ge=1)]
_FRACTION = Annotated[float, Field(ge=0, le=1)]
NGrams = tuple[tuple[_N, _FRACTION], ...]


def _distinct(name: str, grams: NGrams | None) -> str | None:
    ns = [n for n, _ in grams or ()]
    return f"{name}: n={max(ns, key=ns.count)} is given twice" if len(set(ns)) < len(ns) else None


class GopherQuality(_Section):
    """Gopher's quality heuristics (Rae et al. 2021, table A1), datatrove's GopherQualityFilter.
    Words are datatrove's English words, spaCy's tokens: "(self," is three, "don't" two."""

    min_doc_words: int | None = Field(50, ge=0)
    """Drop documents with fewer words than this (words made only of punctuation do not count)."""
    max_doc_words: int | None = Field(100_000, ge=1)
    """Drop documents with more words than this (counted as for min_doc_words)."""
    min_avg_word_length: float | None = Field(3, ge=0)
    """Drop documents whose mean word length (characters, of the words min_doc_words counts) is below this."""
    max_avg_word_length: float | None = Field(10, ge=0)
    """Drop documents whose mean word length is above this."""
    max_symbol_word_ratio: float | None = Field(0.1, ge=0)
    """Drop documents with more '#' per word than this, or more ellipses ('...' or '…') per word
    (all words, punctuation too)."""
    max_bullet_lines_ratio: float | None = Field(0.9, ge=0, le=1)
    """Drop documents where more than this share of lines starts with a bullet ('•' or '-')."""
    max_ellipsis_lines_ratio: float | None = Field(0.3, ge=0, le=1)
    """Drop documents where more than this share of lines ends with '...' or '…'."""
    max_non_alpha_words_ratio: float | None = Field(0.8, ge=0, le=1)
    """Despite datatrove's name, a minimum: drop documents where the share of tokens holding at
    least one letter is below this (0.8: at most 20% of words may be numbers or symbols)."""
    min_stop_words: int | None = Field(2, ge=0)
    """Drop documents containing fewer than this many different words of `stop_words` ("be," holds "be")."""
    stop_words: tuple[str, ...] = ("the", "be", "to", "of", "and", "that", "have", "with")
    """The words min_stop_words looks for, case-sensitive (datatrove's English list)."""

    @model_validator(mode="after")
    def _check(self) -> GopherQuality:
        problems = []
        if self.min_doc_words is not None and self.max_doc_words is not None and self.min_doc_words > self.max_doc_words:
            problems.append(f"min_doc_words: {self.min_doc_words} must be <= max_doc_words ({self.max_doc_words})")
        lo, hi = self.min_avg_word_length, self.max_avg_word_length
        if lo is not None and hi is not None and lo > hi:
            problems.append(f"min_avg_word_length: {lo} must be <= max_avg_word_length ({hi})")
        if self.min_stop_words is not None and self.min_stop_words > len(set(self.stop_words)):
            problems.append(f"min_stop_words: {self.min_stop_words} can never be met with "
                            f"{len(set(self.stop_words))} different stop_words")
        if problems:
            raise ValueError("\n".join(problems))
        return self


class GopherRepetition(_Section):
    """Gopher's repetition heuristics (Rae et al. 2021, table A1), datatrove's GopherRepetitionFilter.
    Character fractions are of the whole document's characters."""

    dup_line_frac: float | None = Field(0.3, ge=0, le=1)
    """Drop documents where more than this share of lines repeats an earlier line."""
    dup_para_frac: float | None = Field(0.3, ge=0, le=1)
    """Drop documents where more than this share of paragraphs (split on blank lines) repeats an
    earlier one."""
    dup_line_char_frac: float | None = Field(0.2, ge=0, le=1)
    """Drop documents where repeated lines hold more than this share of the characters."""
    dup_para_char_frac: float | None = Field(0.2, ge=0, le=1)
    """Drop documents where repeated paragraphs hold more than this share of the characters."""
    top_n_grams: NGrams | None = ((2, 0.2), (3, 0.18), (4, 0.16))
    """(n, limit) pairs: drop documents where the most frequent word n-gram, times its count,
    covers more than `limit` of the characters."""
    dup_n_grams: NGrams | None = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))
    """(n, limit) pairs: drop documents where word n-grams that repeat an earlier one (counted
    without overlap) hold more than `limit` of the characters."""

    @model_validator(mode="after")
    def _check(self) -> GopherRepetition:
        problems = [p for p in (_distinct("top_n_grams", self.top_n_grams), _distinct("dup_n_grams", self.dup_n_grams))
                    if p]
        if problems:
            raise ValueError("\n".join(problems))
        return self


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


class Pii(_Section):
    """Personal data replaced as datatrove's PIIFormatter does (its patterns and replacements; see
    shardline.data.pii for exactly what is and is not caught). A transform, run last, after every
    filter: the filters judge the text as written."""

    emails: bool = True
    """Replace e-mail addresses with email@example.com / firstname.lastname@example.org."""
    ips: bool = True
    """Replace public IPv4 addresses with one of datatrove's six replacement addresses."""


class Decontaminate(_Section):
    """Drop training documents that share a word n-gram with an evaluation set (lowercased words:
    case and punctuation do not hide a copy). Held-out documents are judged too."""

    paths: tuple[str, ...] = Field(min_length=1)
    """Evaluation sets: local .jsonl or .parquet files (relative to the project)."""
    ngram: int = Field(13, ge=1)
    """Words per n-gram (13, as GPT-3's decontamination)."""
    text_field: str = "text"
    """The JSON field or parquet column holding each evaluation document's text."""
